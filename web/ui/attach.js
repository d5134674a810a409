// Files for the next message: picked with the Attach button, dropped on the chat or pasted into
// the message box. Each is uploaded at once (POST /v1/files) and shown as a chip until the
// message is sent with their file ids, or the chip is removed. Thumbnails of a message's images
// (in the transcript) are read with the token and cached as object URLs.
import { el, button } from "./render.js";
import { describe } from "./page.js";

/** Bytes as a short size: 812 B, 14 KB, 3.1 MB. */
export function sizeText(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${Math.round(n / 1024)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}

export class PendingFiles {
  /** `list` is the `<ul>` of chips; `onError(message)` shows a failed upload. */
  constructor(api, list, onError) {
    this.api = api;
    this.list = list;
    this.onError = onError;
    /** `{node, file, state: "uploading" | "ready" | "failed", ref}` in the order added. */
    this.items = [];
  }

  /** Uploads each of `files` (a FileList or array), showing a chip per file. */
  add(files) {
    for (const file of Array.from(files || [])) {
      const item = { file, state: "uploading", ref: null, node: null };
      const status = el("span", { class: "file-state" }, "uploading…");
      const remove = button("×", () => this.remove(item), {
        class: "secondary file-remove",
        "aria-label": `Remove ${file.name || "the file"}`,
      });
      item.status = status;
      item.node = el(
        "li",
        { class: "pending-file", dataset: { state: "uploading" } },
        el("span", { class: "file-name" }, file.name || "pasted file"),
        el("span", { class: "file-size" }, sizeText(file.size)),
        status,
        remove,
      );
      this.items.push(item);
      this.list.append(item.node);
      this.list.hidden = false;
      this.api.uploadFile(file).then(
        (ref) => this.settle(item, "ready", ref, "ready"),
        (e) => {
          this.settle(item, "failed", null, "failed");
          this.onError(`${file.name || "The file"} was not uploaded: ${describe(e)}`);
        },
      );
    }
  }

  settle(item, state, ref, label) {
    item.state = state;
    item.ref = ref;
    item.node.dataset.state = state;
    item.status.textContent = label;
  }

  remove(item) {
    this.items = this.items.filter((i) => i !== item);
    item.node.remove();
    this.list.hidden = this.items.length === 0;
  }

  /** Whether a file is still on its way up. */
  busy() {
    return this.items.some((i) => i.state === "uploading");
  }

  /** The attachments of the message: `[{file_id}]` of the uploaded files. */
  attachments() {
    return this.items.filter((i) => i.state === "ready").map((i) => ({ file_id: i.ref.file_id }));
  }

  /** The uploaded files' references, to show in the sent message. */
  refs() {
    return this.items.filter((i) => i.state === "ready").map((i) => i.ref);
  }

  clear() {
    this.items = [];
    this.list.replaceChildren();
    this.list.hidden = true;
  }
}

/** Object URLs of files already read, by file id: each file is read once per page. */
const urls = new Map();

/**
 * The attachments of a message as nodes: an image as a thumbnail (read with the token), any
 * other file as a chip with its name and size that opens it.
 */
export function attachmentNodes(api, attachments) {
  return attachments.map((a) => {
    const label = `${a.name} (${sizeText(a.bytes || 0)})`;
    if ((a.content_type || "").startsWith("image/")) {
      const img = el("img", { class: "thumb", alt: a.name, title: label });
      objectUrl(api, a.file_id).then((u) => (img.src = u), () => img.replaceWith(chip(api, a, label)));
      return img;
    }
    return chip(api, a, label);
  });
}

function chip(api, a, label) {
  return button(`📎 ${label}`, async () => {
    const u = await objectUrl(api, a.file_id);
    const link = el("a", { href: u, download: a.name });
    link.click();
  }, { class: "secondary file-chip" });
}

function objectUrl(api, fileId) {
  if (!urls.has(fileId)) {
    const p = api.fileUrl(fileId);
    urls.set(fileId, p);
    p.catch(() => urls.delete(fileId));
  }
  return urls.get(fileId);
}
