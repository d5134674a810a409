//! The floors of `providers/`, declared once in `src/lib.rs`'s module comment, checked by the
//! checker every crate shares (`tests/house/layers.rs`): no use points up the floors, no two
//! modules use each other, `docs/architecture.md` shows the same list, and a circle planted
//! between two real modules of this crate is refused.
#[path = "../../tests/house/layers.rs"]
mod layers;

use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn every_module_uses_only_its_own_floor_and_those_below_and_no_circle() {
    layers::assert_floors_kept(&src());
}

#[test]
fn the_architecture_document_shows_the_same_floors() {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/architecture.md");
    layers::assert_document_shows_floors(&src(), &doc);
}

#[test]
fn a_circle_planted_between_wire_and_error_is_refused() {
    layers::assert_planted_circle_refused(&src(), "wire", "error");
}
