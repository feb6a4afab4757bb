// GET / : a small self-contained chat page (HTML + JS, no external resources) that streams replies
// from /v1/chat/completions over SSE.
#pragma once

#include <string_view>

namespace astrai::net {

std::string_view chat_page_html();

}  // namespace astrai::net
