#include "src/core/file_text.h"

#include <fstream>
#include <sstream>

namespace astrai {

Result<std::string> read_text_file(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return not_found(path.string() + ": no such file");
    return io_error(path.string() + ": cannot read");
  }
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return io_error(path.string() + ": cannot read");
  return ss.str();
}

}  // namespace astrai
