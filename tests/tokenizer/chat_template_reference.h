// Test helper: renders chat template cases with Python's jinja2 (chat_template_ref.py, set up as
// transformers does) and with our ChatTemplate, so tests can compare the two byte for byte.
#pragma once

#include <string>
#include <vector>

namespace astrai::test {

struct TemplateCase {
  std::string name;  // for failure messages
  std::string tmpl;
  std::string messages_json = "[]";
  std::string tools_json;  // empty: no tools (None)
  bool add_generation_prompt = false;
  std::string bos_token = "<s>", eos_token = "</s>";
  std::string extra_json;  // JSON object of extra variables, or empty
};

struct RenderOutcome {
  bool ok = false;
  std::string text;   // when ok
  std::string error;  // message when not ok
  std::string type;   // Python exception class (reference only)
};

// All cases in one python3 run (one interpreter start for the whole batch).
std::vector<RenderOutcome> render_with_jinja2(const std::vector<TemplateCase>& cases);
RenderOutcome render_with_astrai(const TemplateCase& c);

// Compares both renderers on every case (Catch2 CHECKs with the case's name): equal text when
// jinja2 succeeds; a failure too when it fails, with the same message for raise_exception.
// Returns how many cases jinja2 rendered without error; `rendered` (optional) gets a flag per case.
size_t expect_same_as_jinja2(const std::vector<TemplateCase>& cases, std::vector<bool>* rendered = nullptr);

}  // namespace astrai::test
