// The safetensors reader on arbitrary files: open() validates the header and every tensor's dtype,
// shape and offsets; whatever it accepts must be readable end to end (every byte of every tensor
// inside the mapping). The reader maps files, so each input goes through a file in /dev/shm.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "src/model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/dev/shm/astrai-fuzz-" + std::to_string(getpid()) + ".safetensors";
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  }
  auto file = astrai::SafeTensorsFile::open(path);
  if (!file.ok()) return 0;
  uint64_t sum = 0;
  for (const astrai::SafeTensor& t : file->tensors()) {
    if (t.numel() < 0) std::abort();
    const auto* p = static_cast<const uint8_t*>(t.data);
    for (size_t i = 0; i < t.nbytes; ++i) sum += p[i];  // ASan: every byte must be mapped
    (void)t.shape_str();
    if (t.shape.size() <= 4) (void)t.view();
  }
  for (const auto& [k, v] : file->metadata()) sum += k.size() + v.size();
  return sum == 1 ? 1 : 0;  // keep `sum` alive; libFuzzer ignores the value
}
