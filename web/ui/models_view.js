// The Models page (#/models): the providers in the order turns try them (the primary first),
// each with its role, whether it answers the next message, its context window and where that
// number came from, its key masked; and the operator's "Connect a model" form: kind, base URL,
// key, model. The server asks the provider live before it stores anything (`POST
// /v1/providers`); a refusal says why under the form, and what was typed stays. After a
// connection a visible notice says what the new provider does (answers the next message, or
// waits as a fallback and how to pick it now); a connected provider can be removed here.
// Others than the operator see why they cannot. What the rows say is in models_state.js.
import { ApiError } from "./api.js";
import { say } from "./actions.js";
import { describe } from "./page.js";
import { el, button } from "./render.js";
import { connectedNotice, roleText, rowFacts } from "./models_state.js";

/** What each kind's base URL usually is, shown as the field's placeholder. */
const PLACEHOLDER = {
  openai: "http://127.0.0.1:11434/v1 (Ollama), https://api.openai.com/v1, …",
  anthropic: "https://api.anthropic.com/v1",
};

function field(label, input, hint = null) {
  return el("label", { class: "field" }, el("span", { class: "field-label" }, label), input, hint && el("small", { class: "hint" }, hint));
}

export class ModelsView {
  /** Draws into `root` (the page's body), reading and writing through `apiClient`. */
  constructor(apiClient, root) {
    this.kind = "models";
    this.api = apiClient;
    this.root = root;
    this.closed = false;
    this.busy = false;
    /** The providers as last read, or null; `forbidden` when the caller is not the operator. */
    this.providers = null;
    this.forbidden = false;
    this.loadError = null;
    this.status = el("p", { class: "visually-hidden", role: "status" });
    this.list = el("div", { class: "providers" });
    /** What the last connection did, under the Connect button, where the eye is. */
    this.notice = el("p", { class: "banner provider-notice", id: "provider-notice", role: "status", hidden: true });
    this.form = this.connectForm();
  }

  close() {
    this.closed = true;
  }

  async open() {
    this.root.replaceChildren(this.status, this.list, this.form.node);
    await this.reload();
  }

  /** The page has one route: nothing to change. */
  async show() {}

  async reload() {
    try {
      const answer = await this.api.providers();
      this.providers = answer.providers || [];
      this.forbidden = false;
      this.loadError = null;
    } catch (e) {
      if (e instanceof ApiError && e.status === 403) this.forbidden = true;
      else this.loadError = e;
    }
    if (!this.closed) this.draw();
  }

  draw() {
    this.form.node.hidden = this.forbidden;
    if (this.forbidden) {
      this.list.replaceChildren(
        el("p", { class: "hint" }, "Only the operator sees and connects model providers. The models you can choose are in each session's model picker."),
      );
      return;
    }
    if (this.loadError) {
      this.list.replaceChildren(el("p", { class: "error" }, `The providers could not be read: ${describe(this.loadError)}`));
      return;
    }
    const providers = this.providers || [];
    if (providers.length === 0) {
      this.list.replaceChildren(
        el(
          "p",
          { class: "banner no-model" },
          "No model is connected yet, so messages are not answered. Connect one below: a local server " +
            "(Ollama, LM Studio, llama.cpp, vLLM) or a hosted API. It is tried before it is saved.",
        ),
      );
      return;
    }
    this.list.replaceChildren(
      el(
        "p",
        { class: "hint" },
        "Tried in this order: when one fails, the next answers. A session can pick another in its model picker.",
      ),
      el("ol", { class: "provider-list" }, ...providers.map((p) => this.row(p))),
    );
  }

  row(p) {
    const facts = rowFacts(p);
    const remove =
      p.source === "connected"
        ? button("Remove", () => this.remove(p.name), { class: "secondary danger-outline", "aria-label": `Remove ${p.name}` })
        : null;
    return el(
      "li",
      { class: "provider", dataset: { name: p.name } },
      el("strong", {}, p.model),
      " · ",
      el("span", { class: "provider-name" }, p.name),
      " ",
      el("span", { class: "badge provider-role" }, roleText(p)),
      p.answers_next ? el("span", { class: "badge answers-next" }, "answers the next message") : null,
      el("div", { class: "hint" }, facts.join(" · ")),
      remove,
    );
  }

  async remove(name) {
    if (this.busy) return;
    if (!window.confirm(`Remove provider ${name}? Turns from now on go without it.`)) return;
    this.busy = true;
    try {
      await this.api.removeProvider(name);
      this.notice.hidden = true;
      say(this.status, `Removed ${name}.`);
    } catch (e) {
      if (!(e instanceof ApiError && e.status === 401)) this.loadError = e;
    } finally {
      this.busy = false;
    }
    await this.reload();
  }

  /** The "Connect a model" form, built once so what was typed survives a redraw. */
  connectForm() {
    const kind = el("select", { name: "kind", id: "provider-kind" }, el("option", { value: "openai" }, "OpenAI-compatible"), el("option", { value: "anthropic" }, "Anthropic"));
    const baseUrl = el("input", { name: "base_url", id: "provider-base-url", type: "url", required: true, autocomplete: "off", spellcheck: "false", placeholder: PLACEHOLDER.openai });
    const apiKey = el("input", { name: "api_key", id: "provider-api-key", type: "password", autocomplete: "off", placeholder: "empty for a local server" });
    const model = el("input", { name: "model", id: "provider-model", required: true, autocomplete: "off", spellcheck: "false", placeholder: "e.g. llama3.2, gpt-4o-mini, claude-sonnet-4-5" });
    const name = el("input", { name: "name", id: "provider-name", required: true, autocomplete: "off", spellcheck: "false", value: "local", pattern: "[A-Za-z0-9._\\-]{1,64}" });
    const error = el("p", { class: "error", role: "alert", id: "provider-error", hidden: true });
    const submit = el("button", { type: "submit", id: "provider-connect" }, "Connect");
    kind.addEventListener("change", () => {
      baseUrl.placeholder = PLACEHOLDER[kind.value];
      if (kind.value === "anthropic" && name.value === "local") name.value = "anthropic";
    });
    const node = el(
      "form",
      { class: "panel connect-model", id: "connect-model", "aria-labelledby": "connect-model-title" },
      el("h3", { id: "connect-model-title" }, "Connect a model"),
      el("p", { class: "hint" }, "The server asks the provider for its models first; nothing is saved unless it answers and serves this model. Its context window is read from the server when it says it. The key is stored encrypted and never shown again."),
      field("Kind", kind),
      field("Base URL", baseUrl, "Usually ends in /v1 (added when the server answers there)."),
      field("API key", apiKey),
      field("Model", model),
      field("Name", name, "How this provider is called in lists and logs."),
      error,
      submit,
      this.notice,
    );
    node.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      if (this.busy) return;
      this.busy = true;
      submit.disabled = true;
      submit.textContent = "Checking…";
      error.hidden = true;
      this.notice.hidden = true;
      const body = { name: name.value.trim(), kind: kind.value, base_url: baseUrl.value.trim(), model: model.value.trim() };
      if (apiKey.value.trim()) body.api_key = apiKey.value.trim();
      let added = null;
      try {
        added = await this.api.connectProvider(body);
        node.reset();
        baseUrl.placeholder = PLACEHOLDER[kind.value];
      } catch (e) {
        if (!(e instanceof ApiError && e.status === 401)) {
          error.textContent = describe(e);
          error.hidden = false;
        }
      } finally {
        this.busy = false;
        submit.disabled = false;
        submit.textContent = "Connect";
      }
      await this.reload();
      if (added && !this.closed) {
        this.notice.textContent = connectedNotice(added, body.base_url, this.providers);
        this.notice.hidden = false;
        this.notice.scrollIntoView({ block: "nearest" });
      }
    });
    return { node };
  }
}
