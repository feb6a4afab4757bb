#include "net/chat_page.h"

namespace astrai::net {

std::string_view chat_page_html() {
  static constexpr std::string_view kPage = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>astrai chat</title>
<style>
  body { font: 15px/1.45 system-ui, sans-serif; margin: 0; display: flex; flex-direction: column; height: 100vh; }
  header { padding: 8px 16px; background: #223; color: #eef; display: flex; gap: 12px; align-items: center; }
  header input { width: 14em; }
  #log { flex: 1; overflow-y: auto; padding: 16px; }
  .msg { max-width: 48em; margin: 0 0 12px; padding: 8px 12px; border-radius: 8px; white-space: pre-wrap; }
  .user { background: #dde8ff; margin-left: auto; }
  .assistant { background: #f1f1f1; }
  .error { background: #fdd; }
  form { display: flex; gap: 8px; padding: 12px 16px; border-top: 1px solid #ccc; }
  textarea { flex: 1; height: 3.2em; font: inherit; }
</style>
</head>
<body>
<header><strong>astrai</strong><span id="model"></span>
  <label>max tokens <input id="max_tokens" type="number" value="128" min="1" style="width:5em"></label>
  <label>temperature <input id="temperature" type="number" value="0.7" min="0" max="2" step="0.1" style="width:4em"></label>
  <label>API key <input id="api_key" type="password" autocomplete="off"></label></header>
<div id="log"></div>
<form id="form"><textarea id="input" placeholder="Type a message, Enter to send"></textarea>
  <button id="send" type="submit">Send</button></form>
<script>
"use strict";
const log = document.getElementById("log");
const input = document.getElementById("input");
const history = [];
function headers() {
  const h = {"Content-Type": "application/json"};
  const key = document.getElementById("api_key").value;
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}
function add(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  div.textContent = text;
  log.appendChild(div);
  log.scrollTop = log.scrollHeight;
  return div;
}
fetch("/v1/models", {headers: headers()}).then(r => r.json()).then(j => {
  if (j.data && j.data[0]) document.getElementById("model").textContent = j.data[0].id;
}).catch(() => {});
async function send(text) {
  history.push({role: "user", content: text});
  add("user", text);
  const out = add("assistant", "");
  const body = {messages: history, stream: true,
                max_tokens: parseInt(document.getElementById("max_tokens").value || "128", 10),
                temperature: parseFloat(document.getElementById("temperature").value || "0.7")};
  let reply = "";
  try {
    const res = await fetch("/v1/chat/completions", {method: "POST", headers: headers(), body: JSON.stringify(body)});
    if (!res.ok) {
      const j = await res.json().catch(() => ({}));
      throw new Error((j.error && j.error.message) || res.statusText);
    }
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buf += decoder.decode(value, {stream: true});
      let cut;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const event = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        for (const line of event.split("\n")) {
          if (!line.startsWith("data: ")) continue;
          const data = line.slice(6);
          if (data === "[DONE]") continue;
          const chunk = JSON.parse(data);
          const delta = chunk.choices && chunk.choices[0] && chunk.choices[0].delta;
          if (delta && delta.content) {
            reply += delta.content;
            out.textContent = reply;
            log.scrollTop = log.scrollHeight;
          }
        }
      }
    }
    out.dataset.done = "1";
    history.push({role: "assistant", content: reply});
  } catch (e) {
    out.className = "msg error";
    out.textContent = "error: " + e.message;
    out.dataset.done = "1";
    history.pop();
  }
}
document.getElementById("form").addEventListener("submit", ev => {
  ev.preventDefault();
  const text = input.value.trim();
  if (!text) return;
  input.value = "";
  send(text);
});
input.addEventListener("keydown", ev => {
  if (ev.key === "Enter" && !ev.shiftKey) {
    ev.preventDefault();
    document.getElementById("form").requestSubmit();
  }
});
</script>
</body>
</html>
)HTML";
  return kPage;
}

}  // namespace astrai::net
