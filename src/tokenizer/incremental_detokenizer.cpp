// IncrementalDetokenizer: each push decodes [previous id, new id] and [previous id] and keeps
// the difference, which is what the new id adds as a non-first token; the first id is decoded
// alone. Bytes are emitted up to the last complete UTF-8 character; a partial one waits in
// pending_ for the next push (or becomes U+FFFD in finish()).
#include "src/core/utf8.h"
#include "src/tokenizer/tokenizer.h"

namespace astrai {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tok, bool skip_special_tokens)
    : tok_(tok), skip_special_(skip_special_tokens) {}

std::string IncrementalDetokenizer::push(int32_t id) {
  if (skip_special_ && tok_.is_special(id)) return {};
  if (id < 0 || id >= tok_.vocab_size()) return {};
  if (window_.empty()) {
    window_.push_back(id);
    const std::string first = tok_.decode_bytes(window_, false);
    pending_ += first;
    prev_bytes_ = first.size();
  } else {
    // window_ holds exactly the previous id here; assign rather than resize + push_back, which
    // GCC 12 misreads as an out-of-bounds write (-Warray-bounds false positive).
    window_.assign({window_.front(), id});
    const std::string both = tok_.decode_bytes(window_, false);
    // prev_bytes_ is the previous id decoded alone as the first of a list, i.e. exactly the
    // prefix `both` starts with.
    if (both.size() >= prev_bytes_) pending_.append(both, prev_bytes_, std::string::npos);
    window_.erase(window_.begin());
    prev_bytes_ = tok_.decode_bytes(window_, false).size();
  }
  const size_t keep = utf8_incomplete_tail(pending_);
  std::string out = utf8_sanitize(std::string_view(pending_).substr(0, pending_.size() - keep));
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string IncrementalDetokenizer::finish() {
  std::string out = utf8_sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace astrai
