// safetensors: the Hugging Face weight format, read zero-copy through mmap and written atomically.
//
// Layout: 8-byte little-endian header length N, N bytes of JSON
//   {"<name>": {"dtype": "F32", "shape": [a, b], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"<key>": "<string>"}}
// then the data buffer; offsets are relative to its start. A model directory holds one
// model.safetensors or several shards listed by model.safetensors.index.json {"weight_map": {...}}.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "src/core/dtype.h"
#include "src/core/status.h"
#include "src/core/tensor.h"

namespace astrai {

// One tensor of an open file. data points into the file's read-only mapping and stays valid as
// long as the SafeTensorsFile / WeightStore that owns it.
struct SafeTensor {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t nbytes = 0;
  std::string file;  // path of the file it lives in

  int64_t numel() const;
  std::string shape_str() const;  // "[2048, 64]"
  // A read-only host view (at most kMaxDims dims). Writing through it is undefined (MAP_PRIVATE
  // pages are shared until written; the loader converts into its own buffers instead).
  Tensor view() const;
};

// The safetensors dtype names ("F32", "BF16", ...) of the DTypes astrai reads and writes.
std::string_view safetensors_dtype_name(DType t);
// Sets out and returns true for a supported safetensors dtype name; false otherwise.
bool parse_safetensors_dtype(std::string_view name, DType& out);

// One mmapped file (read-only, MAP_PRIVATE). Movable, not copyable.
class SafeTensorsFile {
 public:
  // Validates the whole header: length within the file, JSON, dtypes, shapes, offsets inside the
  // data buffer, not overlapping and matching shape * dtype size. Errors name the file and tensor.
  static Result<SafeTensorsFile> open(const std::filesystem::path& file);

  SafeTensorsFile() = default;
  SafeTensorsFile(SafeTensorsFile&& o) noexcept;
  SafeTensorsFile& operator=(SafeTensorsFile&& o) noexcept;
  SafeTensorsFile(const SafeTensorsFile&) = delete;
  SafeTensorsFile& operator=(const SafeTensorsFile&) = delete;
  ~SafeTensorsFile();

  const SafeTensor* find(std::string_view name) const;
  const std::vector<SafeTensor>& tensors() const { return tensors_; }  // in header order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  void unmap();
  std::filesystem::path path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::vector<SafeTensor> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

// The weights of a model directory: model.safetensors, or the shards named by
// model.safetensors.index.json (every shard must exist and hold the tensors the index assigns it).
class WeightStore {
 public:
  static Result<WeightStore> open(const std::filesystem::path& model_dir);

  const SafeTensor* find(std::string_view name) const;
  // The tensor, checked against expected_shape. Errors:
  //   "model.safetensors: tensor 'x' has shape [a, b], expected [c, d]"
  //   "missing tensor 'x' (looked in model.safetensors)"
  Result<const SafeTensor*> get(std::string_view name, std::initializer_list<int64_t> expected_shape) const;
  Result<const SafeTensor*> get(std::string_view name, const std::vector<int64_t>& expected_shape) const;

  const std::vector<SafeTensorsFile>& files() const { return files_; }
  std::vector<std::string> tensor_names() const;  // sorted
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  std::string looked_in_;  // for "missing tensor" errors
  std::vector<SafeTensorsFile> files_;
  std::map<std::string, const SafeTensor*, std::less<>> index_;
};

struct TensorToWrite {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // shape * dtype_size bytes
};

// Writes a safetensors file atomically (a temp file in the same directory, then rename), header
// padded with spaces to a multiple of 8 bytes as the reference implementation does, so every
// tensor's data is 8-byte aligned in the file.
Status write_safetensors(const std::filesystem::path& file, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

// The same, for tensors produced on the fly (random init, training checkpoints): fill(i, dst)
// writes tensor i's nbytes into dst just before it is written, so at most one tensor is in memory.
struct TensorSpec {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  size_t nbytes() const;
};
using TensorFiller = std::function<Status(size_t index, void* dst, size_t nbytes)>;
Status write_safetensors(const std::filesystem::path& file, const std::vector<TensorSpec>& tensors,
                         const TensorFiller& fill, const std::map<std::string, std::string>& metadata = {});

}  // namespace astrai
