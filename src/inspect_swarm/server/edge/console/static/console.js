// The swarm server's console: keeps the signed-in key in this tab's session storage, fills
// the page with the server's HTML fragment (asked for with the key as the bearer header),
// asks again every half second, and runs the page's buttons. Listeners are added once, on
// the document; an update replaces the fragment's nodes, so nothing grows while a page is
// left open.
"use strict";

(() => {
  const STORAGE = "inspect-swarm-console-key";
  const POLL_MS = 500;
  const view = document.getElementById("view");
  const consoleBox = document.getElementById("console");
  const signIn = document.getElementById("sign-in");
  const signOut = document.getElementById("sign-out");
  const notice = document.getElementById("notice");
  let etag = null;
  let timer = null;
  let polling = false;
  let again = false;

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

  // what the user opened stays open when the fragment is replaced
  function replace(html) {
    const open = new Set(
      Array.from(view.querySelectorAll("details[open][id]"), (d) => d.id),
    );
    const parsed = new DOMParser().parseFromString(html, "text/html");
    view.replaceChildren(...parsed.body.childNodes);
    for (const id of open) {
      const details = document.getElementById(id);
      if (details) details.open = true;
    }
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

  async function refresh() {
    if (!key() || document.hidden) return;
    const headers = auth();
    if (etag) headers["If-None-Match"] = etag;
    const response = await fetch(fragmentUrl(), { headers, cache: "no-store" });
    if (response.status === 401) {
      sessionStorage.removeItem(STORAGE);
      etag = null;
      show(false);
      document.getElementById("sign-in-error").textContent = await errorText(response);
      return;
    }
    if (response.status === 304) return;
    if (!response.ok) {
      etag = null;
      view.replaceChildren();
      say(await errorText(response), true);
      return;
    }
    etag = response.headers.get("ETag");
    if (notice.classList.contains("error")) say("");
    replace(await response.text());
  }

  // one poll at a time, and one timer: asking again during a poll asks once more after it
  async function poll() {
    clearTimeout(timer);
    if (polling) {
      again = true;
      return;
    }
    polling = true;
    try {
      await refresh();
    } catch {
      say("The server does not answer; trying again.", true);
      etag = null;
    }
    polling = false;
    if (again) {
      again = false;
      poll();
    } else {
      timer = setTimeout(poll, POLL_MS);
    }
  }

  function now(force = true) {
    if (force) etag = null;
    poll();
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
      now();
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
      now();
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
    now();
  });

  signOut.addEventListener("click", () => {
    sessionStorage.removeItem(STORAGE);
    view.replaceChildren();
    etag = null;
    show(false);
  });

  document.addEventListener("visibilitychange", () => {
    if (!document.hidden) now(false);
  });
  setInterval(tick, 1000);

  show(Boolean(key()));
  if (key()) now();
})();
