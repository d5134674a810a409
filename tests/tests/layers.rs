//! The floors of `tests/` (the test support crate), declared once in `src/lib.rs`'s module
//! comment, checked by the checker every crate shares (`tests/house/layers.rs`): no use points
//! up the floors, no two modules use each other, `docs/architecture.md` shows the same list,
//! and a circle planted between two real modules of this crate is refused.
#[macro_use]
#[path = "../house/layers.rs"]
mod layers;

floors_tests!("wait", "stats");
