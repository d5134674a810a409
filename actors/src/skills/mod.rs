//! Skills (SPEC R5.2; API.md "Memory and skills"): procedures the agent loads on demand.
//! `document` reads a SKILL.md; `catalog` lists the operator's folders and the stored skills
//! and renders the prompt's `# Skills` index; `manage` turns an agent's change into a checked
//! proposal and a proposal into the change it makes; `tools` are `skill_view` and
//! `skill_manage`.
pub mod catalog;
pub mod document;
pub mod manage;
pub mod tools;
