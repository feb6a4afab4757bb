#include "train/data.h"

#include <simdjson.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "src/core/file_text.h"
#include "src/tokenizer/chat_template.h"

namespace astrai::train {
namespace fs = std::filesystem;
namespace {

constexpr char kShardMagic[8] = {'A', 'S', 'T', 'R', 'A', 'I', 'S', 'H'};
constexpr uint32_t kShardVersion = 1;

// FNV-1a, 64-bit: a fingerprint for cache keys (not for security).
struct Fnv {
  uint64_t h = 1469598103934665603ull;
  void add(const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  void add(std::string_view s) {
    const uint64_t n = s.size();
    add(&n, sizeof n);
    add(s.data(), s.size());
  }
};

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// read_text_file's bytes, its errors led by what the file is ("data: PATH: no such file").
Result<std::string> read_all(const fs::path& file, const std::string& what) {
  Result<std::string> r = read_text_file(file);
  if (!r.ok()) return Status(r.status().code(), what + ": " + r.status().message());
  return r;
}

// splitmix64: the shuffle's generator, fully specified here so an order never depends on the
// standard library's distributions.
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::string message_role(const simdjson::dom::element& m) {
  std::string_view role;
  if (m["role"].get(role)) return {};
  return std::string(role);
}

}  // namespace

int64_t TokenizedData::num_loss_tokens() const {
  int64_t n = 0;
  for (uint8_t m : loss_mask) n += m;
  return n;
}

Result<Conversation> tokenize_conversation(const Tokenizer& tok, std::string_view messages_json) {
  auto found = tok.template_for(/*with_tools=*/false);
  if (!found.ok()) return invalid_argument("\"messages\" needs a chat template: " + found.status().message());
  const ChatTemplate* tmpl = *found;
  simdjson::dom::parser parser;
  simdjson::dom::array messages;
  if (parser.parse(simdjson::padded_string(messages_json)).get(messages))
    return invalid_argument("\"messages\" must be a list of message objects");
  std::vector<std::string> items;  // each message as JSON text
  std::vector<std::string> roles;
  for (simdjson::dom::element m : messages) {
    if (!m.is_object()) return invalid_argument("\"messages\" must be a list of message objects");
    items.push_back(simdjson::minify(m));
    roles.push_back(message_role(m));
  }
  auto render = [&](size_t count, bool generation_prompt) -> Result<std::string> {
    ChatTemplateInput in;
    in.messages_json = "[";
    for (size_t i = 0; i < count; ++i) in.messages_json += (i ? "," : "") + items[i];
    in.messages_json += "]";
    in.add_generation_prompt = generation_prompt;
    in.bos_token = tok.special_tokens().bos_token;
    in.eos_token = tok.special_tokens().eos_token;
    auto text = tmpl->render(in);
    if (!text.ok()) return invalid_argument("chat template: " + text.status().message());
    return text;
  };
  ASTRAI_ASSIGN_OR_RETURN(const std::string full, render(items.size(), false));
  std::vector<std::pair<size_t, size_t>> spans;  // byte spans of assistant turns in `full`
  for (size_t i = 0; i < items.size(); ++i) {
    if (roles[i] != "assistant") continue;
    ASTRAI_ASSIGN_OR_RETURN(const std::string head, render(i, true));
    ASTRAI_ASSIGN_OR_RETURN(const std::string upto, render(i + 1, false));
    if (full.compare(0, head.size(), head) != 0 || full.compare(0, upto.size(), upto) != 0 ||
        upto.size() < head.size())
      return invalid_argument("chat template: the rendering of the messages before assistant message " +
                              std::to_string(i) +
                              " is not a prefix of the whole conversation's, so its tokens cannot be found");
    spans.emplace_back(head.size(), upto.size());
  }
  Conversation c;
  c.ids = tok.encode(full, false);
  c.assistant_mask.assign(c.ids.size(), 0);
  // Byte range of each token within `full`.
  size_t pos = 0;
  std::vector<int32_t> pair(2);
  for (size_t t = 0; t < c.ids.size(); ++t) {
    size_t len = 0;
    if (t == 0) {
      len = tok.decode_bytes({c.ids[0]}).size();
    } else {
      pair[0] = c.ids[t - 1];
      pair[1] = c.ids[t];
      len = tok.decode_bytes(pair).size() - tok.decode_bytes({c.ids[t - 1]}).size();
    }
    const size_t begin = pos, end = pos + len;
    pos = end;
    for (const auto& [sb, se] : spans)
      if (begin < se && end > sb) c.assistant_mask[t] = 1;
  }
  if (pos != full.size())
    return unsupported("chat template: the tokenizer's decoded tokens do not add up to the rendered text (" +
                       std::to_string(pos) + " vs " + std::to_string(full.size()) +
                       " bytes), so assistant tokens cannot be located");
  return c;
}

Result<TokenizedData> tokenize_jsonl(const fs::path& file, const Tokenizer& tok) {
  ASTRAI_ASSIGN_OR_RETURN(const std::string text, read_all(file, "data"));
  TokenizedData d;
  const std::optional<int32_t> eos = tok.special_tokens().eos_id;
  simdjson::dom::parser parser;
  size_t start = 0;
  int line_no = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    ++line_no;
    std::string_view line(text.data() + start, end - start);
    start = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = file.string() + " line " + std::to_string(line_no) + ": ";
    simdjson::dom::element doc;
    if (auto err = parser.parse(simdjson::padded_string(line)).get(doc))
      return invalid_argument(where + "not valid JSON (" + simdjson::error_message(err) + ")");
    if (!doc.is_object()) return invalid_argument(where + "not a JSON object");
    std::vector<int32_t> ids;
    std::vector<uint8_t> mask;
    std::string_view s;
    simdjson::dom::array messages;
    if (!doc["text"].get(s)) {
      ids = tok.encode(s, true);
      if (eos && (ids.empty() || ids.back() != *eos)) ids.push_back(*eos);
      mask.assign(ids.size(), 1);
    } else if (!doc["messages"].get(messages)) {
      auto conv = tokenize_conversation(tok, simdjson::minify(messages));
      if (!conv.ok()) return Status(conv.status().code(), where + conv.status().message());
      ids = std::move(conv->ids);
      mask = std::move(conv->assistant_mask);
    } else {
      return invalid_argument(where + "needs \"text\" (a string) or \"messages\" (a list)");
    }
    if (ids.empty()) continue;
    d.doc_starts.push_back(d.tokens.size());
    for (int32_t id : ids) d.tokens.push_back(uint32_t(id));
    d.loss_mask.insert(d.loss_mask.end(), mask.begin(), mask.end());
  }
  return d;
}

std::string tokenizer_fingerprint(const fs::path& model_dir) {
  Fnv h;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"}) {
    h.add(name);
    auto text = read_all(model_dir / name, name);
    h.add(text.ok() ? *text : std::string("<absent>"));
  }
  return hex(h.h);
}

fs::path data_cache_dir() {
  if (const char* d = std::getenv("ASTRAI_CACHE_DIR"); d && *d) return fs::path(d) / "data";
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return fs::path(d) / "astrai" / "data";
  if (const char* d = std::getenv("HOME"); d && *d) return fs::path(d) / ".cache" / "astrai" / "data";
  return fs::temp_directory_path() / "astrai-cache" / "data";
}

Status write_shard(const fs::path& file, const TokenizedData& d) {
  const fs::path tmp = file.string() + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return io_error("cannot write " + tmp.string());
    const uint32_t head[2] = {kShardVersion, 0};
    const uint64_t counts[2] = {d.tokens.size(), d.doc_starts.size()};
    f.write(kShardMagic, 8);
    f.write(reinterpret_cast<const char*>(head), sizeof head);
    f.write(reinterpret_cast<const char*>(counts), sizeof counts);
    f.write(reinterpret_cast<const char*>(d.tokens.data()), std::streamsize(d.tokens.size() * 4));
    f.write(reinterpret_cast<const char*>(d.loss_mask.data()), std::streamsize(d.loss_mask.size()));
    const char pad[8] = {};
    f.write(pad, std::streamsize((8 - d.loss_mask.size() % 8) % 8));
    f.write(reinterpret_cast<const char*>(d.doc_starts.data()), std::streamsize(d.doc_starts.size() * 8));
    f.flush();
    if (!f) {
      fs::remove(tmp);
      return io_error("cannot write " + tmp.string());
    }
  }
  std::error_code ec;
  fs::rename(tmp, file, ec);
  if (ec) return io_error("cannot rename " + tmp.string() + " to " + file.string() + ": " + ec.message());
  return {};
}

Result<TokenizedData> read_shard(const fs::path& file) {
  ASTRAI_ASSIGN_OR_RETURN(const std::string bytes, read_all(file, "shard"));
  const std::string bad = file.string() + ": not a complete astrai token shard";
  if (bytes.size() < 32 || std::memcmp(bytes.data(), kShardMagic, 8) != 0) return corrupt(bad);
  uint32_t version = 0;
  uint64_t n = 0, docs = 0;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&n, bytes.data() + 16, 8);
  std::memcpy(&docs, bytes.data() + 24, 8);
  if (version != kShardVersion) return corrupt(bad + " (version " + std::to_string(version) + ")");
  const uint64_t mask_at = 32 + n * 4, docs_at = mask_at + n + (8 - n % 8) % 8;
  if (n > bytes.size() || docs > bytes.size() || docs_at + docs * 8 != bytes.size()) return corrupt(bad);
  TokenizedData d;
  d.tokens.resize(n);
  d.loss_mask.resize(n);
  d.doc_starts.resize(docs);
  std::memcpy(d.tokens.data(), bytes.data() + 32, n * 4);
  std::memcpy(d.loss_mask.data(), bytes.data() + mask_at, n);
  std::memcpy(d.doc_starts.data(), bytes.data() + docs_at, docs * 8);
  return d;
}

Result<TokenizedData> load_or_tokenize(const fs::path& file, const Tokenizer& tok,
                                       const std::string& tokenizer_key, const fs::path& cache_dir,
                                       bool* cache_hit) {
  if (cache_hit) *cache_hit = false;
  std::error_code ec;
  const uint64_t size = fs::file_size(file, ec);
  if (ec) return not_found(file.string() + ": cannot open the data file: " + ec.message());
  const auto mtime = fs::last_write_time(file, ec).time_since_epoch().count();
  ASTRAI_ASSIGN_OR_RETURN(const std::string contents, read_all(file, "data"));
  Fnv h;
  h.add(&kShardVersion, sizeof kShardVersion);
  h.add(&size, sizeof size);
  h.add(&mtime, sizeof mtime);
  h.add(contents);
  h.add(tokenizer_key);
  const fs::path shard = cache_dir / (file.stem().string() + "-" + hex(h.h) + ".shard");
  if (fs::exists(shard, ec)) {
    auto d = read_shard(shard);
    if (d.ok()) {
      if (cache_hit) *cache_hit = true;
      return d;
    }
  }
  ASTRAI_ASSIGN_OR_RETURN(TokenizedData d, tokenize_jsonl(file, tok));
  fs::create_directories(cache_dir, ec);
  if (ec) return io_error("cannot create the data cache " + cache_dir.string() + ": " + ec.message());
  ASTRAI_RETURN_IF_ERROR(write_shard(shard, d));
  return d;
}

Result<WindowLoader> WindowLoader::create(const TokenizedData* data, int64_t seq_len, int64_t batch_size,
                                          uint64_t seed, bool shuffle, const std::string& what) {
  WindowLoader l;
  l.data_ = data;
  l.seq_len_ = seq_len;
  l.batch_size_ = batch_size;
  l.seed_ = seed;
  l.shuffle_ = shuffle;
  const int64_t n = int64_t(data->tokens.size());
  l.num_windows_ = n > seq_len ? (n - 1) / seq_len : 0;
  if (l.num_windows_ == 0)
    return invalid_argument(what + ": " + std::to_string(n) +
                            " tokens, fewer than seq_len + 1 = " + std::to_string(seq_len + 1));
  if (data->num_loss_tokens() == 0)
    return invalid_argument(what + ": no token carries a loss (no assistant turns?)");
  l.order_ = l.epoch_order(0);
  return l;
}

std::vector<int64_t> WindowLoader::epoch_order(uint64_t epoch) const {
  std::vector<int64_t> order(static_cast<size_t>(num_windows_));
  for (int64_t i = 0; i < num_windows_; ++i) order[size_t(i)] = i;
  if (!shuffle_) return order;
  uint64_t state = seed_ ^ (0x5851f42d4c957f2dull * (epoch + 1));
  for (int64_t i = num_windows_ - 1; i > 0; --i) {
    const auto j = int64_t(splitmix64(state) % uint64_t(i + 1));
    std::swap(order[size_t(i)], order[size_t(j)]);
  }
  return order;
}

TrainBatch WindowLoader::make_batch() const {
  TrainBatch b;
  b.batch = int(batch_size_);
  b.seq_len = int(seq_len_);
  const size_t n = size_t(batch_size_ * seq_len_);
  b.tokens.assign(n, 0);
  b.targets.assign(n, kIgnore);
  b.positions.assign(n, 0);
  b.doc_start.assign(n, 0);
  return b;
}

void WindowLoader::fill_row(int64_t w, TrainBatch& b, int row) const {
  const auto& starts = data_->doc_starts;
  const int64_t begin = w * seq_len_;
  // The document containing `begin`, then walk forward.
  size_t d = size_t(std::upper_bound(starts.begin(), starts.end(), uint64_t(begin)) - starts.begin()) - 1;
  for (int64_t j = 0; j < seq_len_; ++j) {
    const int64_t g = begin + j;
    while (d + 1 < starts.size() && uint64_t(g) >= starts[d + 1]) ++d;
    const int64_t doc_begin = std::max<int64_t>(int64_t(starts[d]), begin);
    const size_t o = size_t(row) * size_t(seq_len_) + size_t(j);
    b.tokens[o] = int32_t(data_->tokens[size_t(g)]);
    b.positions[o] = int32_t(g - doc_begin);
    b.doc_start[o] = int32_t(doc_begin - begin);
    const bool next_is_new_doc = d + 1 < starts.size() && uint64_t(g + 1) == starts[d + 1];
    b.targets[o] =
        next_is_new_doc || !data_->loss_mask[size_t(g + 1)] ? kIgnore : int32_t(data_->tokens[size_t(g + 1)]);
  }
}

void WindowLoader::fill_empty_row(TrainBatch& b, int row) const {
  for (int64_t j = 0; j < seq_len_; ++j) {
    const size_t o = size_t(row) * size_t(seq_len_) + size_t(j);
    b.tokens[o] = 0;
    b.targets[o] = kIgnore;
    b.positions[o] = int32_t(j);
    b.doc_start[o] = 0;
  }
}

void WindowLoader::set_cursor(const DataCursor& c) {
  if (c.epoch != cursor_.epoch) order_ = epoch_order(c.epoch);
  cursor_ = c;
}

void WindowLoader::next(TrainBatch& b) {
  for (int r = 0; r < int(batch_size_); ++r) {
    if (cursor_.index >= num_windows_) set_cursor({cursor_.epoch + 1, 0});
    fill_row(order_[size_t(cursor_.index++)], b, r);
  }
}

}  // namespace astrai::train
