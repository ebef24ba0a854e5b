// The swarm server's console: keeps the signed-in key in this tab's session storage, fills
// the page with the server's HTML fragment (asked for with the key as the bearer header and
// kept up to date over one open answer), and runs the page's buttons. Listeners are added
// once, on the document; an update replaces the fragment's nodes, so nothing grows while a
// page is left open.
"use strict";

(() => {
  const STORAGE = "inspect-swarm-console-key";
  const RETRY_MS = 1000;
  const view = document.getElementById("view");
  const consoleBox = document.getElementById("console");
  const signIn = document.getElementById("sign-in");
  const signOut = document.getElementById("sign-out");
  const notice = document.getElementById("notice");
  let stream = null;
  let timer = null;

  const key = () => sessionStorage.getItem(STORAGE);
  const auth = () => ({ Authorization: `Bearer ${key()}` });

  function show(signedIn) {
    signIn.hidden = signedIn;
    consoleBox.hidden = !signedIn;
    signOut.hidden = !signedIn;
    if (!signedIn) document.getElementById("key").focus();
  }

  function say(text, isError = false) {
    notice.textContent = text;
    notice.classList.toggle("error", isError);
  }

  function fragmentUrl() {
    return view.dataset.fragment + location.search;
  }

  // what makes an element of the fragment the same one in the next (for the keyboard's focus)
  const SAME = ["id", "href", "data-action", "data-download", "data-copy"];

  function identity(element) {
    const name = SAME.find((attribute) => element.hasAttribute(attribute));
    return name && `[${name}="${CSS.escape(element.getAttribute(name))}"]`;
  }

  // what the user opened stays open, and what had the focus keeps it, when the fragment is
  // replaced
  function replace(html) {
    const open = new Set(
      Array.from(view.querySelectorAll("details[open][id]"), (d) => d.id),
    );
    const focused = view.contains(document.activeElement) && identity(document.activeElement);
    const parsed = new DOMParser().parseFromString(html, "text/html");
    view.replaceChildren(...parsed.body.childNodes);
    for (const id of open) {
      const details = document.getElementById(id);
      if (details) details.open = true;
    }
    if (focused) view.querySelector(focused)?.focus();
    view.setAttribute("aria-busy", "false");
    tick();
  }

  async function errorText(response) {
    try {
      const body = await response.json();
      return body.detail || response.statusText;
    } catch {
      return response.statusText;
    }
  }

  function refused(text) {
    sessionStorage.removeItem(STORAGE);
    show(false);
    document.getElementById("sign-in-error").textContent = text;
  }

  // One open answer per page: the server sends the fragment, then again each time it changes.
  // A new view (a filter, an action, the tab shown again) replaces the stream; a stream the
  // server or the network ended is opened again after a moment.
  function watch() {
    clearTimeout(timer);
    if (stream) stream.abort();
    stream = null;
    if (!key() || document.hidden) return;
    const controller = new AbortController();
    stream = controller;
    follow(controller)
      .catch(() => {
        if (!controller.signal.aborted) say("The server does not answer; trying again.", true);
      })
      .finally(() => {
        if (stream === controller && !controller.signal.aborted) {
          stream = null;
          timer = setTimeout(watch, RETRY_MS);
        }
      });
  }

  async function follow(controller) {
    const headers = { ...auth(), Accept: "text/event-stream" };
    const { signal } = controller;
    const response = await fetch(fragmentUrl(), { headers, cache: "no-store", signal });
    if (!response.ok) {
      const text = await errorText(response);
      controller.abort();
      if (response.status === 401) {
        refused(text);
      } else {
        view.replaceChildren();
        view.setAttribute("aria-busy", "false");
        say(text, true);
      }
      return;
    }
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      for (let end = buffer.indexOf("\n\n"); end >= 0; end = buffer.indexOf("\n\n")) {
        if (!handle(buffer.slice(0, end))) {
          controller.abort();
          return;
        }
        buffer = buffer.slice(end + 2);
      }
    }
  }

  // one server-sent event; false when the stream has said its last
  function handle(block) {
    let kind = "";
    const data = [];
    for (const line of block.split("\n")) {
      if (line.startsWith("event: ")) kind = line.slice(7);
      else if (line.startsWith("data: ")) data.push(line.slice(6));
    }
    const text = data.join("\n");
    if (kind === "fragment") {
      if (notice.classList.contains("error")) say("");
      replace(text);
    } else if (kind === "refused") {
      refused(text);
      return false;
    } else if (kind === "gone") {
      say(text, true);
      return false;
    }
    return true;
  }

  // ages and running durations move on between updates without asking the server
  function words(seconds) {
    if (seconds < 60) return `${Math.max(0, Math.floor(seconds))} s`;
    const minutes = Math.floor(seconds / 60);
    if (minutes < 60) return `${minutes} min ${Math.floor(seconds % 60)} s`;
    return `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
  }

  function tick() {
    const nowMs = Date.now();
    for (const time of view.querySelectorAll("time[data-age]")) {
      const seconds = (nowMs - Date.parse(time.dateTime)) / 1000;
      time.textContent = seconds >= 0 ? `${words(seconds)} ago` : `in ${words(-seconds)}`;
      time.title = time.dateTime;
    }
    for (const time of view.querySelectorAll("time[data-since]")) {
      time.textContent = words((nowMs - Date.parse(time.dateTime)) / 1000);
    }
  }

  async function act(button) {
    if (button.dataset.confirm && !window.confirm(button.dataset.confirm)) return;
    button.disabled = true;
    try {
      const response = await fetch(button.dataset.action, { method: "POST", headers: auth() });
      const body = await response.json();
      say(response.ok ? body.message : body.detail, !response.ok);
    } finally {
      button.disabled = false;
      watch();
    }
  }

  async function download(button) {
    const response = await fetch(button.dataset.download, { headers: auth(), cache: "no-store" });
    if (!response.ok) {
      say(await errorText(response), true);
      return;
    }
    const url = URL.createObjectURL(await response.blob());
    const link = document.createElement("a");
    link.href = url;
    link.download = button.dataset.name || "results.jsonl";
    link.click();
    setTimeout(() => URL.revokeObjectURL(url), 0);
  }

  async function copy(button) {
    const text = document.getElementById(button.dataset.copy).textContent;
    try {
      await navigator.clipboard.writeText(text);
      say("Copied.");
    } catch {
      // no clipboard outside a secure context: select the text for the user to copy
      const range = document.createRange();
      range.selectNodeContents(document.getElementById(button.dataset.copy));
      getSelection().removeAllRanges();
      getSelection().addRange(range);
      say("Selected: copy it with your keyboard.");
    }
  }

  document.addEventListener("click", (event) => {
    const button = event.target.closest("button");
    if (!button) return;
    if (button.dataset.action) act(button);
    else if (button.dataset.download) download(button);
    else if (button.dataset.copy) copy(button);
  });

  for (const form of document.querySelectorAll("form[data-filter]")) {
    const apply = () => {
      const params = new URLSearchParams();
      for (const [name, value] of new FormData(form)) if (value) params.set(name, value);
      history.replaceState(null, "", params.size ? `?${params}` : location.pathname);
      watch();
    };
    form.addEventListener("change", apply);
    form.addEventListener("input", apply);
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      apply();
    });
  }

  document.getElementById("sign-in-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const input = document.getElementById("key");
    sessionStorage.setItem(STORAGE, input.value.trim());
    input.value = "";
    document.getElementById("sign-in-error").textContent = "";
    show(true);
    watch();
  });

  signOut.addEventListener("click", () => {
    sessionStorage.removeItem(STORAGE);
    watch();
    view.replaceChildren();
    show(false);
  });

  document.addEventListener("visibilitychange", watch);
  setInterval(tick, 1000);

  show(Boolean(key()));
  watch();
})();
