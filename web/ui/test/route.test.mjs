// Unit tests of the page's hash routes (../route.js): `node --test web/ui/test/*.test.mjs`.
import test from "node:test";
import assert from "node:assert/strict";
import { parseRoute, skillHref, MEMORY_HREF, MODELS_HREF, SKILLS_HREF, NEW_SKILL_HREF } from "../route.js";

const ID = "0f8fad5b-d9cb-469f-a165-70867728950e";

test("a session's address opens it; anything unknown opens no session", () => {
  assert.deepEqual(parseRoute(`#/s/${ID}`), { page: "session", id: ID });
  for (const h of ["", "#", "#/", "#/s/not-a-uuid", `#/s/${ID}/x`, "#/memory/x", "#/skill/", "#/skill/a/b", undefined]) {
    assert.deepEqual(parseRoute(h), { page: "session", id: null }, String(h));
  }
});

test("the Memory, Skills and Models pages and their routes", () => {
  assert.deepEqual(parseRoute(MEMORY_HREF), { page: "memory" });
  assert.deepEqual(parseRoute(MODELS_HREF), { page: "models" });
  assert.deepEqual(parseRoute("#/models/x"), { page: "session", id: null });
  assert.deepEqual(parseRoute(SKILLS_HREF), { page: "skills", name: null, create: false });
  assert.deepEqual(parseRoute(NEW_SKILL_HREF), { page: "skills", name: null, create: true });
  assert.deepEqual(parseRoute("#/skill/release-notes"), { page: "skills", name: "release-notes", create: false });
  // A skill called "new" is a skill, not the new-skill editor.
  assert.deepEqual(parseRoute(skillHref("new")), { page: "skills", name: "new", create: false });
  assert.deepEqual(parseRoute("#/skill/%E0%A4%A"), { page: "session", id: null }, "a broken escape opens nothing");
});

test("a skill's address reads back as its name, whatever it holds", () => {
  for (const name of ["a", "with space", "a/b", "ü-ß", "x?y#z", "100%"]) {
    const href = skillHref(name);
    assert.ok(!href.slice(2).includes("#") && !href.includes("?"), href);
    assert.deepEqual(parseRoute(href), { page: "skills", name, create: false });
  }
});
