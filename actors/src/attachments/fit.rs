//! Images made to fit what providers take (issue 26): Anthropic refuses an image over 5 MB
//! (base64) or 8000 px a side and works best at most 1568 px on the long edge; OpenAI scales
//! anything past 2048 px down itself, after it was sent. An image over [`MAX_EDGE`] px or
//! [`MAX_BYTES`] bytes is scaled down to [`TARGET_EDGE`] px on its long edge and encoded again
//! (PNG when it has transparency, else JPEG) before it goes on the wire. The stored file and
//! the transcript never change (SPEC R8.1: only the request's copy does). An image that cannot
//! be read goes as it is; the provider says what it thinks of it.
use std::collections::HashMap;
use std::io::Cursor;
use std::sync::{Arc, Mutex, OnceLock};

/// The longest edge an image keeps as it is.
pub const MAX_EDGE: u32 = 2048;
/// The most bytes an image keeps as it is: 5 MB of base64 (Anthropic's bound) holds 3.75 MB.
pub const MAX_BYTES: usize = 3_700_000;
/// The long edge of a scaled image: what Anthropic recommends, and within OpenAI's high detail.
pub const TARGET_EDGE: u32 = 1568;
/// JPEG quality of a scaled photo.
const JPEG_QUALITY: u8 = 85;

/// An image as it goes on the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fitted {
    pub bytes: Vec<u8>,
    pub media_type: String,
    /// Whether it was scaled (else these are the stored bytes).
    pub scaled: bool,
}

/// `bytes` (of type `media_type`) within the bounds above. CPU-bound for a large image: call it
/// off the async threads.
pub fn fit(bytes: Vec<u8>, media_type: &str) -> Fitted {
    let as_is = |bytes| Fitted {
        bytes,
        media_type: media_type.to_owned(),
        scaled: false,
    };
    let Some((w, h)) = dimensions(&bytes) else {
        return as_is(bytes);
    };
    if w.max(h) <= MAX_EDGE && bytes.len() <= MAX_BYTES {
        return as_is(bytes);
    }
    match scaled(&bytes) {
        Some((bytes, media_type)) => Fitted {
            bytes,
            media_type: media_type.to_owned(),
            scaled: true,
        },
        None => as_is(bytes),
    }
}

/// How many scaled images the process keeps, so that an image is scaled once, not at every
/// turn that shows it.
const CACHED: usize = 32;

fn cache() -> &'static Mutex<HashMap<String, Arc<Fitted>>> {
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<Fitted>>>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// The image of file `file_id` as it goes on the wire: scaled once (off the async threads)
/// and kept while it is among the last [`CACHED`] scaled.
pub async fn fit_file(file_id: &str, bytes: Vec<u8>, media_type: &str) -> Arc<Fitted> {
    if let Some(hit) = cache().lock().ok().and_then(|c| c.get(file_id).cloned()) {
        return hit;
    }
    let within =
        dimensions(&bytes).is_none_or(|(w, h)| w.max(h) <= MAX_EDGE) && bytes.len() <= MAX_BYTES;
    if within {
        return Arc::new(Fitted {
            bytes,
            media_type: media_type.to_owned(),
            scaled: false,
        });
    }
    let kind = media_type.to_owned();
    let fitted = match tokio::task::spawn_blocking(move || fit(bytes, &kind)).await {
        Ok(f) => Arc::new(f),
        Err(e) => {
            tracing::warn!(file = %file_id, error = %e, "scaling an image failed; it is named instead");
            return Arc::new(Fitted {
                bytes: Vec::new(),
                media_type: media_type.to_owned(),
                scaled: false,
            });
        }
    };
    if fitted.scaled {
        tracing::debug!(file = %file_id, bytes = fitted.bytes.len(), "image scaled for the model");
        if let Ok(mut c) = cache().lock() {
            if c.len() >= CACHED {
                c.clear();
            }
            c.insert(file_id.to_owned(), fitted.clone());
        }
    }
    fitted
}

/// Width and height from the header alone (nothing decoded).
fn dimensions(bytes: &[u8]) -> Option<(u32, u32)> {
    image::ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .ok()?
        .into_dimensions()
        .ok()
}

fn scaled(bytes: &[u8]) -> Option<(Vec<u8>, &'static str)> {
    let img = image::load_from_memory(bytes).ok()?;
    let (w, h) = (img.width(), img.height());
    let edge = TARGET_EDGE.min(w.max(h));
    // `resize` keeps the ratio and fits both sides within the box.
    let small = img.resize(edge, edge, image::imageops::FilterType::Triangle);
    let mut out = Cursor::new(Vec::new());
    if small.color().has_alpha() {
        small.write_to(&mut out, image::ImageFormat::Png).ok()?;
        Some((out.into_inner(), "image/png"))
    } else {
        let rgb = small.to_rgb8();
        image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, JPEG_QUALITY)
            .encode_image(&rgb)
            .ok()?;
        Some((out.into_inner(), "image/jpeg"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png(w: u32, h: u32, alpha: bool) -> Vec<u8> {
        let mut out = Cursor::new(Vec::new());
        let img: image::DynamicImage = if alpha {
            image::RgbaImage::from_fn(w, h, |x, y| {
                image::Rgba([(x % 256) as u8, (y % 256) as u8, 7, 128])
            })
            .into()
        } else {
            image::RgbImage::from_fn(w, h, |x, y| {
                image::Rgb([(x % 256) as u8, (y % 256) as u8, 7])
            })
            .into()
        };
        img.write_to(&mut out, image::ImageFormat::Png).unwrap();
        out.into_inner()
    }

    #[test]
    fn r8_1_a_small_image_goes_as_it_is() {
        let bytes = png(64, 32, false);
        let f = fit(bytes.clone(), "image/png");
        assert!(!f.scaled);
        assert_eq!(f.bytes, bytes);
        assert_eq!(f.media_type, "image/png");
    }

    #[test]
    fn r8_1_a_wide_photo_is_scaled_to_the_target_edge_keeping_its_ratio() {
        let f = fit(png(4000, 1000, false), "image/png");
        assert!(f.scaled);
        assert_eq!(f.media_type, "image/jpeg");
        assert_eq!(dimensions(&f.bytes), Some((TARGET_EDGE, TARGET_EDGE / 4)));
    }

    #[test]
    fn r8_1_transparency_stays_png() {
        let f = fit(png(1000, 3000, true), "image/png");
        assert!(f.scaled);
        assert_eq!(f.media_type, "image/png");
        let (w, h) = dimensions(&f.bytes).unwrap();
        assert_eq!(h, TARGET_EDGE);
        assert!((w as i64 - (TARGET_EDGE / 3) as i64).abs() <= 1, "{w}");
    }

    #[test]
    fn r8_1_bytes_that_are_not_an_image_go_as_they_are() {
        let f = fit(b"not an image".to_vec(), "image/png");
        assert!(!f.scaled);
        assert_eq!(f.bytes, b"not an image");
    }
}
