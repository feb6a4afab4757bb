// Reference results from Hugging Face's JS tokenizers (@huggingface/tokenizers), one JSON line
// out per JSON line in:
//   {"text": s, "add_special_tokens"?: bool}      -> {"ids": [...]}
//   {"bytes_b64": b, "add_special_tokens"?: bool} -> {"ids": [...]}   the bytes decoded as UTF-8 with
//        U+FFFD replacement (WHATWG TextDecoder, the same as Python's errors="replace"), then encoded
//   {"ids": [...], "skip_special_tokens"?: bool}  -> {"text": s}
//   node hf_encode.mjs DIR < in.jsonl > out.jsonl        (DIR: tokenizer.json + tokenizer_config.json)
// Decoding turns clean_up_tokenization_spaces off: that is a transformers post-processing step,
// not part of the tokenizer (astrai, like the Rust `tokenizers` library, never applies it).
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "../node/package.json"));
const hf = await import(pathToFileURL(require.resolve("@huggingface/tokenizers")).href);
const Tokenizer = hf.Tokenizer ?? hf.default.Tokenizer;

const dir = process.argv[2];
const tokenizerJson = JSON.parse(readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
let config = {};
try {
  config = JSON.parse(readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
} catch {}
const tok = new Tokenizer(tokenizerJson, config);
const utf8 = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });

const out = [];
for (const line of readFileSync(0, "utf8").split("\n")) {
  if (!line.trim()) continue;
  const item = JSON.parse(line);
  if (item.ids !== undefined) {
    const text = item.ids.length === 0 ? "" : tok.decode(item.ids, {
      skip_special_tokens: !!item.skip_special_tokens,
      clean_up_tokenization_spaces: false,
    });
    out.push(JSON.stringify({ text }));
  } else {
    const text = item.bytes_b64 !== undefined ? utf8.decode(Buffer.from(item.bytes_b64, "base64")) : item.text;
    const ids = tok.encode(text, { add_special_tokens: item.add_special_tokens ?? true }).ids;
    out.push(JSON.stringify({ ids }));
  }
}
process.stdout.write(out.join("\n") + (out.length ? "\n" : ""));
