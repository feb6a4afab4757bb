#include "net/websocket_frames.h"

#include "src/core/json_writer.h"

namespace astrai::net {
namespace od = simdjson::ondemand;

MaybeError parse_client_frame(std::string_view text, ClientFrame& out) {
  auto err = for_each_body_field(text, "a frame", [&](std::string_view k, JsonValue& v) -> MaybeError {
    if (k == "type") return read_string(v, "type", out.type);
    if (k != "id") return std::nullopt;
    od::json_type t;
    if (v.type().get(t)) return bad_field("id", "is not valid JSON");
    if (t == od::json_type::string) return read_string(v, "id", out.id);
    if (t == od::json_type::number) return read_raw(v, "id", out.id);
    return bad_field("id", "must be a string or a number");
  });
  if (err) return err;
  if (out.type != "generate" && out.type != "cancel")
    return bad_field("type", "must be 'generate' or 'cancel'");
  if (out.id.empty()) return bad_field("id", "is required");
  return std::nullopt;
}

std::string ws_error_frame(const std::string& id, const std::string& message) {
  JsonWriter w;
  w.begin_object().key("type").value("error").key("id");
  if (id.empty())
    w.null();
  else
    w.value(id);
  w.key("message").value(message).end_object();
  return w.take();
}

namespace {

// Frames are newline-separated in the returned string; the session sends each line as one frame
// (JSON we write never contains a raw newline).
class WsFormatter final : public ResponseFormatter {
 public:
  explicit WsFormatter(std::string id) : id_(std::move(id)) {}
  bool streaming() const override { return true; }

  std::string on_deltas(const std::vector<ChoiceDelta>& deltas, const Generation&) override {
    std::string out;
    for (const auto& d : deltas) {
      if (d.finish != FinishReason::none) {
        finish_ = finish_reason_name(d.finish);
        if (!d.text.empty()) frame(out, d.text, -1);
        continue;
      }
      // One frame per token; its text may be empty while a UTF-8 character or stop string is pending.
      for (size_t i = 0; i < d.tokens.size(); ++i)
        frame(out, i + 1 == d.tokens.size() ? d.text : "", d.tokens[i].id);
    }
    return out;
  }

  std::string end(const Generation& g) override {
    JsonWriter w;
    w.begin_object().key("type").value("done").key("id").value(id_).key("finish_reason").value(finish_);
    w.key("usage").begin_object().key("prompt_tokens").value(g.prompt_tokens());
    w.key("completion_tokens").value(g.completion_tokens());
    w.key("total_tokens").value(g.prompt_tokens() + g.completion_tokens()).end_object().end_object();
    return w.take() + "\n";
  }

 private:
  void frame(std::string& out, const std::string& text, int32_t token) {
    JsonWriter w;
    w.begin_object().key("type").value("token").key("id").value(id_).key("text").value(text).key("token_id");
    if (token >= 0)
      w.value(token);
    else
      w.null();
    w.end_object();
    out += w.str();
    out += '\n';
  }
  std::string id_;
  std::string finish_ = "stop";
};

}  // namespace

std::unique_ptr<ResponseFormatter> make_ws_formatter(std::string id) {
  return std::make_unique<WsFormatter>(std::move(id));
}

}  // namespace astrai::net
