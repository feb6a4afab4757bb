#include "src/tokenizer/bpe_model.h"

#include <algorithm>
#include <atomic>
#include <cstdio>

#include "src/core/utf8.h"
#include "src/tokenizer/tokenizer.h"
#include "src/tokenizer/unicode_text.h"

namespace astrai::tok {

void MergeTable::reserve(size_t n) {
  size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  slots_.assign(cap, Slot{kEmpty, 0, 0});
  mask_ = cap - 1;
  size_ = 0;
}

void MergeTable::insert(int32_t a, int32_t b, uint32_t rank, int32_t merged) {
  if ((size_ + 1) * 2 > slots_.size()) {
    std::vector<Slot> old = std::move(slots_);
    reserve(std::max<size_t>(size_ + 1, old.size()));
    for (const Slot& s : old)
      if (s.key != kEmpty) insert(int32_t(s.key >> 32), int32_t(uint32_t(s.key)), s.rank, s.merged);
  }
  const uint64_t key = (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
  for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.key == key) return;  // a repeated merge keeps its first (lowest) rank
    if (s.key == kEmpty) {
      s = Slot{key, rank, merged};
      ++size_;
      return;
    }
  }
}

namespace {

// GPT-2 alphabet text -> raw bytes; false if a code point is outside the alphabet.
bool from_byte_alphabet(std::string_view s, std::string& out) {
  out.clear();
  for (size_t i = 0; i < s.size();) {
    const int n = utf8_sequence_length(s.substr(i));
    if (n <= 0) return false;
    const int b = unicode_to_byte(utf8_decode(s.substr(i, size_t(n))));
    if (b < 0) return false;
    out += char(b);
    i += size_t(n);
  }
  return true;
}

std::atomic<uint64_t> g_next_uid{1};

struct CacheSlot {
  uint64_t owner = 0;
  std::string word;
  std::vector<int32_t> ids;
};
constexpr size_t kCacheSlots = 1 << 15;
constexpr size_t kMaxCachedWord = 64;

}  // namespace

Result<std::unique_ptr<BpeModel>> BpeModel::parse(const JsonEl& model, bool byte_level) {
  std::unique_ptr<BpeModel> m(new BpeModel());
  m->uid_ = g_next_uid.fetch_add(1);
  m->byte_level_ = byte_level;
  m->byte_fallback_ = bool_or(model, "byte_fallback", false);
  m->ignore_merges_ = bool_or(model, "ignore_merges", false);
  m->fuse_unk_ = bool_or(model, "fuse_unk", false);
  if (!str_or(model, "continuing_subword_prefix", "").empty() ||
      !str_or(model, "end_of_word_suffix", "").empty())
    return unsupported(
        "tokenizer.json: BPE continuing_subword_prefix / end_of_word_suffix are not supported");
  if (auto d = member(model, "dropout")) {
    double p = 0;
    if (d->get_double().get(p) == simdjson::SUCCESS && p > 0)
      return unsupported("tokenizer.json: BPE dropout is not supported (it only applies to training)");
  }

  auto vocab = member(model, "vocab");
  if (!vocab || !vocab->is_object())
    return corrupt("tokenizer.json: model.vocab is missing or not an object");
  size_t max_id = 0, count = 0;
  for (auto [key, value] : as_object(*vocab)) {
    int64_t id;
    if (value.get_int64().get(id) != simdjson::SUCCESS || id < 0)
      return corrupt("tokenizer.json: model.vocab entry '" + std::string(key) + "' has no valid id");
    if (id > kMaxTokenId)
      return corrupt("tokenizer.json: model.vocab: '" + std::string(key) + "' has id " + std::to_string(id) +
                     ", beyond the largest supported token id " + std::to_string(kMaxTokenId));
    max_id = std::max(max_id, size_t(id));
    ++count;
  }
  // Real vocabularies number their tokens 0..n-1 (added tokens may fill a few gaps); a sparse one
  // would make the per-id tables below mostly empty.
  if (count && max_id >= 2 * count + 1024)
    return corrupt("tokenizer.json: model.vocab: ids reach " + std::to_string(max_id) + " with only " +
                   std::to_string(count) + " entries");
  m->model_text_.assign(count ? max_id + 1 : 0, std::string());
  if (byte_level) m->original_.assign(m->model_text_.size(), std::string());
  std::string raw;
  for (auto [key, value] : as_object(*vocab)) {
    const size_t id = size_t(value.get_int64().value_unsafe());
    if (byte_level) {
      m->original_[id] = std::string(key);
      // An entry outside the alphabet cannot come out of BPE on bytes; keep its text as is.
      m->model_text_[id] = from_byte_alphabet(key, raw) ? raw : std::string(key);
    } else {
      m->model_text_[id] = std::string(key);
    }
  }
  m->vocab_.reserve(count);
  if (byte_level) m->originals_.reserve(count);
  for (size_t id = 0; id < m->model_text_.size(); ++id) {
    if (m->model_text_[id].empty() && (!byte_level || m->original_[id].empty())) continue;
    m->vocab_.insert(m->model_text_[id], int32_t(id));
    if (byte_level) m->originals_.insert(m->original_[id], int32_t(id));
  }
  for (int b = 0; b < 256; ++b) {
    m->byte_ids_[b] = m->fallback_ids_[b] = -1;
    const char byte = char(b);
    auto it = m->vocab_.find(std::string_view(&byte, 1));
    if (byte_level && it) m->byte_ids_[b] = *it;
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    if (auto f = m->vocab_.find(std::string_view(name))) m->fallback_ids_[b] = *f;
  }
  const std::string unk = str_or(model, "unk_token", "");
  if (!unk.empty()) {
    if (auto id = m->token_to_id(unk)) m->unk_id_ = *id;
  }

  auto merges = member(model, "merges");
  if (merges && !merges->is_array()) return corrupt("tokenizer.json: model.merges is not an array");
  if (merges) {
    auto arr = as_array(*merges);
    m->merges_.reserve(arr.size());
    uint32_t rank = 0;
    std::string a_raw, b_raw;
    for (JsonEl item : arr) {
      std::string_view a, b;
      if (item.is_string()) {  // "a b"
        std::string_view s = item.get_string().value_unsafe();
        const size_t sp = s.find(' ');
        if (sp == std::string_view::npos)
          return corrupt("tokenizer.json: merge '" + std::string(s) + "' has no space");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else if (item.is_array() && as_array(item).size() == 2) {  // ["a", "b"]
        auto pair = as_array(item);
        if (pair.at(0).get_string().get(a) != simdjson::SUCCESS ||
            pair.at(1).get_string().get(b) != simdjson::SUCCESS)
          return corrupt("tokenizer.json: a merge is not a pair of strings");
      } else {
        return corrupt("tokenizer.json: model.merges entries must be \"a b\" or [\"a\", \"b\"]");
      }
      const auto ia = m->token_to_id(a), ib = m->token_to_id(b);
      const uint32_t r = rank++;
      if (!ia || !ib) continue;  // HF refuses such files; skipping keeps the rest usable
      const std::string joined = m->model_text_[size_t(*ia)] + m->model_text_[size_t(*ib)];
      auto merged = m->vocab_.find(joined);
      if (!merged) continue;
      m->merges_.insert(*ia, *ib, r, *merged);
    }
  }
  return m;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  return (byte_level_ ? originals_ : vocab_).find(token);
}

const std::string& BpeModel::id_to_token(int32_t id) const {
  static const std::string empty;
  if (id < 0 || size_t(id) >= model_text_.size()) return empty;
  return byte_level_ ? original_[size_t(id)] : model_text_[size_t(id)];
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (auto id = vocab_.find(word)) {
      out.push_back(*id);
      return;
    }
  }
  if (word.size() > kMaxCachedWord) {
    merge_word(word, out);
    return;
  }
  thread_local std::vector<CacheSlot> cache(kCacheSlots);
  CacheSlot& slot = cache[(StringIdMap::hash(word) ^ uid_ * 0x9E3779B97F4A7C15ULL) & (kCacheSlots - 1)];
  if (slot.owner == uid_ && slot.word == word) {
    out.insert(out.end(), slot.ids.begin(), slot.ids.end());
    return;
  }
  const size_t start = out.size();
  merge_word(word, out);
  slot.owner = uid_;
  slot.word.assign(word);
  slot.ids.assign(out.begin() + std::ptrdiff_t(start), out.end());
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  struct Sym {
    int32_t id, prev, next;
  };
  struct Cand {
    uint32_t rank;
    int32_t pos, left, right;
  };
  thread_local std::vector<Sym> syms;
  thread_local std::vector<Cand> heap;
  syms.clear();
  heap.clear();

  auto add = [&](int32_t id) {
    const int32_t i = int32_t(syms.size());
    syms.push_back({id, i - 1, i + 1});
  };
  // Initial symbols: bytes (byte-level) or characters, with byte fallback / unk for unknowns.
  bool last_unk = false;
  for (size_t i = 0; i < word.size();) {
    size_t n = 1;
    if (!byte_level_) {
      const int len = utf8_sequence_length(word.substr(i));
      n = len > 0 ? size_t(len) : 1;
    }
    const std::string_view ch = word.substr(i, n);
    i += n;
    int32_t id = -1;
    if (byte_level_)
      id = byte_ids_[static_cast<unsigned char>(ch[0])];
    else if (auto v = vocab_.find(ch))
      id = *v;
    if (id >= 0) {
      add(id);
      last_unk = false;
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : ch) all = all && fallback_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        for (char c : ch) add(fallback_ids_[static_cast<unsigned char>(c)]);
        last_unk = false;
        continue;
      }
    }
    if (unk_id_) {
      if (!(fuse_unk_ && last_unk)) add(*unk_id_);
      last_unk = true;
    }
  }
  if (syms.empty()) return;
  syms.back().next = -1;

  auto worse = [](const Cand& a, const Cand& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  auto push_pair = [&](int32_t pos) {
    const int32_t nx = syms[size_t(pos)].next;
    if (nx < 0) return;
    uint32_t rank;
    int32_t merged;
    if (merges_.find(syms[size_t(pos)].id, syms[size_t(nx)].id, rank, merged)) {
      heap.push_back({rank, pos, syms[size_t(pos)].id, syms[size_t(nx)].id});
      std::push_heap(heap.begin(), heap.end(), worse);
    }
  };
  for (int32_t i = 0; i + 1 < int32_t(syms.size()); ++i) push_pair(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), worse);
    const Cand c = heap.back();
    heap.pop_back();
    Sym& left = syms[size_t(c.pos)];
    if (left.id != c.left || left.next < 0) continue;  // stale: left changed or was absorbed
    Sym& right = syms[size_t(left.next)];
    if (right.id != c.right) continue;
    uint32_t rank = 0;
    int32_t merged = -1;
    merges_.find(c.left, c.right, rank, merged);
    left.id = merged;
    right.id = -1;  // absorbed
    left.next = right.next;
    if (left.next >= 0) syms[size_t(left.next)].prev = c.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = syms[size_t(i)].next) out.push_back(syms[size_t(i)].id);
}

}  // namespace astrai::tok
