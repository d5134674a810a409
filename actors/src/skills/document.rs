//! A `SKILL.md` (API.md "Memory and skills"): YAML front matter with `name` and
//! `description`, then the body the agent follows. The same rules hold for a folder the
//! operator installs, a skill stored through the API and one an agent proposes.
use serde::Deserialize;

/// The longest SKILL.md accepted, in bytes.
pub const MAX_CONTENT_BYTES: usize = 64 * 1024;
/// The longest description, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 1024;

/// A parsed SKILL.md.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkillDoc {
    pub name: String,
    /// On one line, whitespace collapsed.
    pub description: String,
    /// What follows the front matter.
    pub body: String,
}

#[derive(Deserialize)]
struct FrontMatter {
    name: Option<String>,
    description: Option<String>,
}

/// A skill's name: a folder name and a path segment, so lowercase letters, digits and `-`,
/// `_`, `.` (not first), at most 64.
pub fn check_name(name: &str) -> Result<(), String> {
    // `proposals` is a path of the API (`/v1/skills/proposals`), not a name.
    let ok = !name.is_empty()
        && name != "proposals"
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-_.".contains(c));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{:?} is not a skill name: 1 to 64 of a-z, 0-9, '-', '_', '.', starting with a \
             letter or digit",
            name.chars().take(80).collect::<String>()
        ))
    }
}

/// Reads a SKILL.md: its front matter must name the skill and describe it.
pub fn parse(text: &str) -> Result<SkillDoc, String> {
    if text.len() > MAX_CONTENT_BYTES {
        return Err(format!(
            "a SKILL.md holds at most {MAX_CONTENT_BYTES} bytes; this one has {}",
            text.len()
        ));
    }
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let rest = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
        .ok_or("a SKILL.md starts with YAML front matter: a line `---`, `name: …`, `description: …`, a line `---`")?;
    let (yaml, body) =
        split_front_matter(rest).ok_or("the front matter has no closing `---` line")?;
    let fm: FrontMatter = serde_yaml_ng::from_str(yaml)
        .map_err(|e| format!("the front matter is not valid YAML: {e}"))?;
    let name = fm.name.ok_or("the front matter has no `name`")?;
    check_name(&name)?;
    let description = collapse(
        &fm.description
            .ok_or("the front matter has no `description`")?,
    );
    check_description(&description)?;
    Ok(SkillDoc {
        name,
        description,
        body: body.to_owned(),
    })
}

/// A description must say something, on at most [`MAX_DESCRIPTION_CHARS`].
pub fn check_description(description: &str) -> Result<(), String> {
    if description.trim().is_empty() {
        return Err("the `description` is empty: say when the skill is useful".into());
    }
    let n = description.chars().count();
    if n > MAX_DESCRIPTION_CHARS {
        return Err(format!(
            "the `description` has {n} characters; at most {MAX_DESCRIPTION_CHARS}"
        ));
    }
    Ok(())
}

/// A SKILL.md with this front matter and body.
pub fn render(name: &str, description: &str, body: &str) -> String {
    let quoted = |s: &str| serde_json::Value::from(s).to_string();
    let body = body.trim_start_matches('\n');
    format!(
        "---\nname: {}\ndescription: {}\n---\n{body}{}",
        quoted(name),
        quoted(&collapse(description)),
        if body.ends_with('\n') { "" } else { "\n" }
    )
}

/// The YAML and what follows its closing `---` line.
fn split_front_matter(rest: &str) -> Option<(&str, &str)> {
    let mut at = 0;
    for line in rest.split_inclusive('\n') {
        if line.trim_end() == "---" {
            return Some((&rest[..at], &rest[at + line.len()..]));
        }
        at += line.len();
    }
    None
}

fn collapse(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r5_2_a_skill_md_is_read_from_its_front_matter() {
        let doc = parse(
            "---\nname: deploy-app\ndescription: >\n  Deploy the app\n  to staging.\nversion: 2\n---\n# Steps\n1. build\n",
        )
        .expect("valid");
        assert_eq!(doc.name, "deploy-app");
        assert_eq!(doc.description, "Deploy the app to staging.");
        assert_eq!(doc.body, "# Steps\n1. build\n");
    }

    #[test]
    fn r5_2_a_rendered_skill_reads_back_as_itself() {
        let text = render("a.b_c-1", "Says: \"hi\" # not a comment", "body\n");
        let doc = parse(&text).expect("valid");
        assert_eq!(doc.name, "a.b_c-1");
        assert_eq!(doc.description, "Says: \"hi\" # not a comment");
        assert_eq!(doc.body, "body\n");
    }

    #[test]
    fn r5_2_bad_skill_md_is_refused_with_the_reason() {
        let refused = |t: &str| parse(t).expect_err(t);
        assert!(refused("# no front matter").contains("front matter"));
        assert!(refused("---\nname: x\n").contains("closing"));
        assert!(refused("---\ndescription: d\n---\n").contains("no `name`"));
        assert!(refused("---\nname: x\n---\n").contains("no `description`"));
        assert!(refused("---\nname: X Y\ndescription: d\n---\n").contains("not a skill name"));
        assert!(refused("---\nname: ../etc\ndescription: d\n---\n").contains("not a skill name"));
        assert!(refused("---\nname: [1\n---\n").contains("YAML"));
        assert!(refused("---\nname: x\ndescription: \"  \"\n---\n").contains("empty"));
        let huge = format!("---\nname: x\ndescription: d\n---\n{}", "a".repeat(70_000));
        assert!(refused(&huge).contains("at most"));
    }
}
