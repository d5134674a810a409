// Unit tests of the Skills page's logic: SKILL.md front matter (../skill_text.js), the list and
// the proposals (../skills_state.js), the line diff (../diff.js) and the API client's skill calls
// (../api.js, with `fetch` replaced). Run with `node --test web/ui/test/*.test.mjs`.
import test from "node:test";
import assert from "node:assert/strict";
import { parseSkill, buildSkill, skillTemplate, validateSkill, yamlScalar, NESTED } from "../skill_text.js";
import { sortSkills, usesText, skillMeta, editable, proposalView, sortProposals, isDirty } from "../skills_state.js";
import { lineDiff, splitLines } from "../diff.js";
import { Api, ApiError } from "../api.js";

const SKILL = `---
name: release-notes
description: Writes release notes from the merged pull requests.
---

# Release notes

1. List the merged PRs.
`;

test("a SKILL.md's front matter gives its name and description, and the body follows", () => {
  const p = parseSkill(SKILL);
  assert.equal(p.ok, true);
  assert.equal(p.name, "release-notes");
  assert.equal(p.description, "Writes release notes from the merged pull requests.");
  assert.equal(p.body, "\n# Release notes\n\n1. List the merged PRs.\n");
  // Windows line endings and a byte order mark read the same.
  const crlf = parseSkill(`\uFEFF${SKILL.replace(/\n/g, "\r\n")}`);
  assert.deepEqual([crlf.name, crlf.description], [p.name, p.description]);
});

test("quoted, folded, literal and continued values read as YAML reads them", () => {
  const fm = (lines) => parseSkill(`---\n${lines.join("\n")}\n---\nbody\n`);
  assert.equal(fm(['name: "a-b"', 'description: "Use when: \\"x\\" \\u00e9\\n"']).description, 'Use when: "x" é\n');
  assert.equal(fm(["name: a", "description: 'It''s: fine' # note"]).description, "It's: fine");
  assert.equal(fm(["name: a", "description: >", "  Folded", "  lines.", "", "  Second paragraph.", "name2: b"]).description, "Folded lines.\nSecond paragraph.\n");
  assert.equal(fm(["name: a", "description: |-", "  Kept", "    indented", "  lines"]).description, "Kept\n  indented\nlines");
  assert.equal(fm(["name: a", "description: A plain value", "  continued on the next line # comment"]).description, "A plain value continued on the next line");
  assert.equal(fm(["name: a  # the name", "description: d"]).name, "a");
  const nested = fm(["name: a", "description: d", "metadata:", "  author: me", "allowed-tools: [read_file, grep]"]);
  assert.equal(nested.ok, true);
  assert.equal(nested.fields.metadata, NESTED);
  assert.equal(nested.fields["allowed-tools"], "[read_file, grep]");
  assert.equal(fm(["name: a", "description:"]).description, null, "an empty value");
});

test("broken front matter is refused with where and why", () => {
  const error = (text) => {
    const p = parseSkill(text);
    assert.equal(p.ok, false, `accepted: ${text}`);
    return p.error;
  };
  assert.match(error("# no front matter\n"), /starts with its front matter/);
  assert.match(error("---\nname: a\ndescription: d\n"), /no closing/);
  assert.match(error("---\nname: a\nname: b\n---\n"), /line 3: "name" is given twice/);
  assert.match(error("---\nname: a\njust words\n---\n"), /line 3: expected "key: value"/);
  assert.match(error('---\nname: a\ndescription: "open\n---\n'), /quotes are not closed/);
  assert.match(error('---\nname: a\ndescription: "a" b\n---\n'), /after the closing quote/);
  assert.match(error("---\nname: a\ndescription: Use when: deploying\n---\n"), /must be in quotes/);
  assert.match(error("---\nname: a\ndescription: @mention\n---\n"), /starting with "@" must be in quotes/);
  assert.match(error("---\n  name: a\n---\n"), /indented line/);
});

test("a value is written plain when YAML reads it back the same, else quoted, and always reads back", () => {
  assert.equal(yamlScalar("release-notes"), "release-notes");
  assert.equal(yamlScalar("Writes notes, then stops."), "Writes notes, then stops.");
  assert.equal(yamlScalar("émoji 👍 (and more)"), "émoji 👍 (and more)");
  const quoted = ["Use when: deploying", "true", "null", "12", "1.5", "2026-12-01", "- a list?", "#hash", " padded ", "a # b", "line\nbreak", "tab\there", "'single'", "", "ends with:", "@me", "[x]"];
  // Quotes and backslashes inside a plain value are only characters there.
  for (const tricky of [...quoted, "émoji 👍", "plain-words", 'say "hi" \\ bye']) {
    const written = yamlScalar(tricky);
    assert.equal(written.startsWith('"'), quoted.includes(tricky), `${JSON.stringify(tricky)} written as ${written}`);
    const back = parseSkill(buildSkill({ name: "a", description: tricky, body: "b" }));
    assert.equal(back.ok, true, `${JSON.stringify(tricky)} as ${written}: ${back.error}`);
    assert.equal(back.description, tricky, `${JSON.stringify(tricky)} written as ${written}`);
  }
  assert.equal(yamlScalar("true"), '"true"', "a value YAML would read as a boolean is quoted");
});

test("buildSkill and the template make a SKILL.md the editor accepts", () => {
  const text = buildSkill({ name: "deploy", description: "Deploys: carefully.", body: "\n\n# Deploy\nSteps.\n\n\n" });
  assert.equal(text, '---\nname: deploy\ndescription: "Deploys: carefully."\n---\n\n# Deploy\nSteps.\n');
  const t = skillTemplate();
  assert.deepEqual(validateSkill(t), { ok: true, name: "new-skill", description: parseSkill(t).description });
  assert.match(parseSkill(t).body, /## Steps/);
  assert.equal(parseSkill(skillTemplate("web-search")).name, "web-search");
});

test("validation before PUT: a name, the right one, a usable one, new ones unique, and a description", () => {
  const skill = (name, description = "Does things.") => buildSkill({ name, description, body: "# x" });
  assert.deepEqual(validateSkill(skill("deploy"), { name: "deploy" }), { ok: true, name: "deploy", description: "Does things." });
  assert.match(validateSkill(skill("deploy-2"), { name: "deploy" }).error, /must stay "deploy".*create a new one/);
  assert.match(validateSkill(skill("deploy"), { existing: ["deploy"] }).error, /exists already/);
  assert.equal(validateSkill(skill("deploy"), { name: "deploy", existing: ["deploy"] }).ok, true, "an existing skill is saved under its own name");
  assert.match(validateSkill(skill("../etc")).error, /cannot be a skill's name/);
  assert.match(validateSkill(skill("has space")).error, /cannot be a skill's name/);
  assert.match(validateSkill(skill("x".repeat(65))).error, /cannot be a skill's name/);
  assert.equal(validateSkill(skill("x".repeat(64))).ok, true);
  assert.match(validateSkill(skill("deploy", "   ")).error, /no description/);
  assert.match(validateSkill("---\ndescription: d\n---\n").error, /no name/);
  assert.match(validateSkill("---\nname:\n  nested: yes\ndescription: d\n---\n").error, /no name/);
  assert.match(validateSkill("no front matter").error, /front matter/);
});

test("the list is sorted by name and says where each skill is from and how much it is used", () => {
  const skills = Object.freeze([{ name: "b" }, { name: "B" }, { name: "a" }, { name: "c" }]);
  assert.deepEqual(sortSkills(skills).map((s) => s.name), ["a", "B", "b", "c"]);
  assert.deepEqual([0, 1, 2, undefined].map(usesText), ["never used", "used once", "used 2 times", "never used"]);
  const fmt = (iso) => `<${iso}>`;
  assert.equal(skillMeta({ source: "dir", uses: 3, last_used_at: "T" }, fmt), "folder · used 3 times · last used <T>");
  assert.equal(skillMeta({ source: "api", uses: 0, last_used_at: null }, fmt), "API · never used");
  assert.equal(editable({ source: "dir" }), false);
  assert.equal(editable({ source: "api" }), true);
  assert.equal(editable(null), false);
  assert.equal(isDirty("a\nb\n", "a\r\nb\r\n"), false, "line endings aside");
  assert.equal(isDirty("a\nb\n", "a\nc\n"), true);
});

test("lineDiff keeps what both texts share and marks what was removed and added", () => {
  const show = (lines) => lines.map((l) => `${l.op}${l.text}`);
  assert.deepEqual(show(lineDiff("a\nb\nc\nd\n", "a\nB\nc\nd\ne\n")), [" a", "-b", "+B", " c", " d", "+e"]);
  assert.deepEqual(show(lineDiff("", "x\ny")), ["+x", "+y"]);
  assert.deepEqual(show(lineDiff("x\ny", null)), ["-x", "-y"]);
  assert.deepEqual(show(lineDiff("same\n", "same")), [" same"], "a final line break is no line");
  assert.deepEqual(show(lineDiff("a\nx\nb\ny\nc", "a\nb\nc")), [" a", "-x", " b", "-y", " c"]);
  // Past the bound: all old lines out, all new lines in (still correct, only less minimal).
  assert.deepEqual(show(lineDiff("k\na\nb\nk", "k\nc\nd\nk", 1)), [" k", "-a", "-b", "+c", "+d", " k"]);
  assert.deepEqual(splitLines("a\r\nb\rc\n"), ["a", "b", "c"]);
  // Every line of both texts is in the diff, in order.
  const before = "1\n2\n3\n4\n5\n6";
  const after = "0\n2\n3\n5\n6\n7";
  const d = lineDiff(before, after);
  assert.deepEqual(d.filter((l) => l.op !== "+").map((l) => l.text), splitLines(before));
  assert.deepEqual(d.filter((l) => l.op !== "-").map((l) => l.text), splitLines(after));
});

test("a proposal reads as what it would do: a new SKILL.md, old → new, or what it deletes", () => {
  const base = { id: "p1", session_id: "s1", created_at: "2026-12-01T00:00:00Z", description: null, content: null, old: null, new: null };
  const create = proposalView({ ...base, action: "create", name: "deploy", description: "Deploys.", content: "---\nname: deploy\n---\n" });
  assert.equal(create.title, 'Create the skill "deploy"');
  assert.equal(create.description, "Deploys.");
  assert.deepEqual(create.blocks[0].lines.map((l) => l.op), ["+", "+", "+"]);

  const patch = proposalView({ ...base, action: "patch", name: "deploy", old: "Run make.\nThen push.", new: "Run make test.\nThen push." });
  assert.equal(patch.title, 'Change the skill "deploy"');
  assert.equal(patch.blocks[0].label, "Old text → new text");
  assert.deepEqual(patch.blocks[0].lines, [
    { op: "-", text: "Run make." },
    { op: "+", text: "Run make test." },
    { op: " ", text: "Then push." },
  ]);

  const del = proposalView({ ...base, action: "delete", name: "deploy" });
  assert.deepEqual([del.title, del.blocks], ['Delete the skill "deploy"', []], "no content: nothing to show but the name");
  const delWith = proposalView({ ...base, action: "delete", name: "deploy", content: "a\nb" });
  assert.deepEqual(delWith.blocks[0].lines.map((l) => l.op), ["-", "-"]);

  const order = sortProposals(Object.freeze([{ id: "2", created_at: "2026-12-02T00:00:00Z" }, { id: "1", created_at: "2026-12-01T00:00:00Z" }]));
  assert.deepEqual(order.map((p) => p.id), ["1", "2"]);
});

// ---------- the API client's skill calls ----------

function stubFetch(t, replies) {
  const calls = [];
  const saved = globalThis.fetch;
  globalThis.fetch = async (path, init) => {
    calls.push({ path, method: init.method, body: init.body ? JSON.parse(init.body) : undefined });
    const [status, json] = replies.shift() ?? [500, null];
    return new Response(json === null ? null : JSON.stringify(json), { status, headers: { "Content-Type": "application/json" } });
  };
  t.after(() => (globalThis.fetch = saved));
  return calls;
}

test("the client calls every skill endpoint with its method, path and body", async (t) => {
  const calls = stubFetch(t, [
    [200, { skills: [] }],
    [200, { name: "a b", content: SKILL, files: [] }],
    [200, { name: "a b" }],
    [204, null],
    [200, { proposals: [] }],
    [200, { id: "p1", status: "denied" }],
  ]);
  const api = new Api("tok");
  await api.skills();
  assert.equal((await api.skill("a b")).content, SKILL);
  await api.putSkill("a b", SKILL);
  assert.equal(await api.deleteSkill("a b"), null);
  await api.skillProposals();
  assert.deepEqual(await api.decideSkillProposal("p1", "deny"), { id: "p1", status: "denied" });
  assert.deepEqual(
    calls.map((c) => [c.method, c.path, c.body]),
    [
      ["GET", "/v1/skills", undefined],
      ["GET", "/v1/skills/a%20b", undefined],
      ["PUT", "/v1/skills/a%20b", { content: SKILL }],
      ["DELETE", "/v1/skills/a%20b", undefined],
      ["GET", "/v1/skills/proposals", undefined],
      ["POST", "/v1/skills/proposals/p1", { decision: "deny" }],
    ],
  );
});

test("a refused skill write keeps the API's code: 403 forbidden, 400 invalid_skill, 409 dir_skill", async (t) => {
  stubFetch(t, [
    [403, { error: { code: "forbidden", message: "only the operator may change skills" } }],
    [400, { error: { code: "invalid_skill", message: "description is missing" } }],
    [409, { error: { code: "dir_skill", message: "installed as a folder" } }],
  ]);
  let signedOut = 0;
  const api = new Api("tok", () => signedOut++);
  const refused = (status, code) => (e) => e instanceof ApiError && e.status === status && e.code === code;
  await assert.rejects(api.putSkill("a", SKILL), refused(403, "forbidden"));
  await assert.rejects(api.putSkill("a", SKILL), refused(400, "invalid_skill"));
  await assert.rejects(api.deleteSkill("a"), refused(409, "dir_skill"));
  assert.equal(signedOut, 0, "only a 401 signs out");
});
