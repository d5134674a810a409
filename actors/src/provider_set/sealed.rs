//! API keys sealed at rest: AES-256-GCM (ring, already in the build through rustls) under a
//! key kept in a file beside the database (`security.secrets_key_file`, by default
//! `<data_dir>/secrets.key`), never in the database. Someone who copies the database alone gets
//! no key; the file is made once, readable by its owner only.
//!
//! A sealed value is `v1:` followed by base64 of nonce (12 random bytes) ‖ ciphertext ‖ tag, with
//! the provider's name as associated data, so a sealed key moved to another row does not open.
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use std::io::Write;
use std::path::{Path, PathBuf};

const PREFIX: &str = "v1:";

/// Why a key could not be loaded, made, sealed or opened.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error("the secrets key file {path}: {reason}")]
    KeyFile { path: PathBuf, reason: String },
    #[error("the sealed key does not open with this secrets key (another replica's key file, or a changed one)")]
    WrongKey,
    #[error("the sealed key is not in the expected form")]
    Malformed,
}

/// The key that seals and opens provider keys.
pub struct SealKey {
    key: LessSafeKey,
}

impl std::fmt::Debug for SealKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealKey(<redacted>)")
    }
}

fn key_file_error(path: &Path, reason: impl std::fmt::Display) -> SealError {
    SealError::KeyFile {
        path: path.to_owned(),
        reason: reason.to_string(),
    }
}

impl SealKey {
    /// The key in `path`, if the file exists.
    pub fn load(path: &Path) -> Result<Option<Self>, SealError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::parse(path, &text).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(key_file_error(path, e)),
        }
    }

    /// The key in `path`, made first when the file does not exist: written whole to a
    /// temporary file (mode 0600, synced) and linked into place, so two processes making it at
    /// once end with one key, and a crash never leaves half a key.
    pub fn load_or_create(path: &Path) -> Result<Self, SealError> {
        if let Some(key) = Self::load(path)? {
            return Ok(key);
        }
        let mut bytes = [0u8; 32];
        SystemRandom::new()
            .fill(&mut bytes)
            .map_err(|_| key_file_error(path, "no random bytes from the OS"))?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| key_file_error(path, e))?;
        }
        let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
        let written = (|| -> std::io::Result<()> {
            let mut f = std::fs::OpenOptions::new();
            f.write(true).create(true).truncate(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut f, 0o600);
            let mut file = f.open(&tmp)?;
            file.write_all(B64.encode(bytes).as_bytes())?;
            file.write_all(b"\n")?;
            file.sync_all()
        })();
        let linked = written.and_then(|()| match std::fs::hard_link(&tmp, path) {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            other => other,
        });
        let removed = std::fs::remove_file(&tmp);
        linked.map_err(|e| key_file_error(path, e))?;
        if let Err(e) = removed {
            tracing::warn!(file = %tmp.display(), error = %e, "could not remove a temporary key file");
        }
        Self::load(path)?.ok_or_else(|| key_file_error(path, "vanished after it was made"))
    }

    fn parse(path: &Path, text: &str) -> Result<Self, SealError> {
        let bytes = B64
            .decode(text.trim())
            .map_err(|_| key_file_error(path, "is not base64"))?;
        let unbound = UnboundKey::new(&AES_256_GCM, &bytes)
            .map_err(|_| key_file_error(path, "does not hold 32 bytes"))?;
        Ok(Self {
            key: LessSafeKey::new(unbound),
        })
    }

    /// `plain` sealed, bound to `name`.
    pub fn seal(&self, name: &str, plain: &str) -> Result<String, SealError> {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .map_err(|_| SealError::Malformed)?;
        let mut data = plain.as_bytes().to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(name.as_bytes()),
                &mut data,
            )
            .map_err(|_| SealError::Malformed)?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&data);
        Ok(format!("{PREFIX}{}", B64.encode(out)))
    }

    /// The plain value of `sealed`, which was sealed bound to `name`.
    pub fn open(&self, name: &str, sealed: &str) -> Result<String, SealError> {
        let raw = sealed
            .strip_prefix(PREFIX)
            .and_then(|b| B64.decode(b).ok())
            .filter(|r| r.len() > NONCE_LEN)
            .ok_or(SealError::Malformed)?;
        let (nonce, rest) = raw.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SealError::Malformed)?;
        let mut data = rest.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(name.as_bytes()), &mut data)
            .map_err(|_| SealError::WrongKey)?;
        String::from_utf8(plain.to_vec()).map_err(|_| SealError::Malformed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r8_4_a_key_is_made_once_and_seals_and_opens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("secrets.key");
        assert!(SealKey::load(&path).unwrap().is_none());
        let key = SealKey::load_or_create(&path).unwrap();
        let again = SealKey::load_or_create(&path).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "only its owner reads the key file");
        }
        let sealed = key.seal("main", "sk-live-1234567890").unwrap();
        assert!(sealed.starts_with("v1:"));
        assert!(!sealed.contains("sk-live"));
        assert_ne!(
            sealed,
            key.seal("main", "sk-live-1234567890").unwrap(),
            "a new nonce each time"
        );
        assert_eq!(again.open("main", &sealed).unwrap(), "sk-live-1234567890");
        assert!(
            matches!(key.open("other", &sealed), Err(SealError::WrongKey)),
            "bound to its name"
        );
        let other_dir = tempfile::tempdir().unwrap();
        let other = SealKey::load_or_create(&other_dir.path().join("k")).unwrap();
        assert!(matches!(
            other.open("main", &sealed),
            Err(SealError::WrongKey)
        ));
        assert!(matches!(
            key.open("main", "v1:AAAA"),
            Err(SealError::Malformed)
        ));
        assert!(matches!(
            key.open("main", "sk-plain"),
            Err(SealError::Malformed)
        ));
        let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temporary file is left");
    }

    #[test]
    fn a_bad_key_file_is_an_error_that_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secrets.key");
        std::fs::write(&path, "not base64 !!").unwrap();
        let e = SealKey::load(&path).unwrap_err().to_string();
        assert!(e.contains("secrets.key") && e.contains("base64"), "{e}");
        std::fs::write(&path, B64.encode([1u8; 16])).unwrap();
        let e = SealKey::load(&path).unwrap_err().to_string();
        assert!(e.contains("32 bytes"), "{e}");
    }
}
