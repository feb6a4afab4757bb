#include "src/model/safetensors.h"

#include <fcntl.h>
#include <simdjson.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "src/core/json_writer.h"

namespace astrai {
namespace fs = std::filesystem;

namespace {

// The reference implementation refuses headers above 100 MB; so do we (a corrupt length would
// otherwise make us allocate whatever the first 8 bytes say).
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// numel * elem_size, or false on overflow / negative dims.
bool byte_size(const std::vector<int64_t>& shape, size_t elem, uint64_t& out) {
  unsigned __int128 n = elem;
  for (int64_t d : shape) {
    if (d < 0) return false;
    n *= uint64_t(d);
    if (n > (static_cast<unsigned __int128>(1) << 62)) return false;
  }
  out = uint64_t(n);
  return true;
}

std::string errno_text() {
  return std::strerror(errno);
}

}  // namespace

// ---- SafeTensor ---------------------------------------------------------------------------------

int64_t SafeTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string SafeTensor::shape_str() const {
  return shape_string(shape);
}

Tensor SafeTensor::view() const {
  Tensor t;
  t.data = const_cast<void*>(data);
  t.dtype = dtype;
  t.device = Device::cpu;
  t.ndim = int(std::min<size_t>(shape.size(), kMaxDims));
  for (int i = 0; i < t.ndim; ++i) t.shape[i] = shape[i];
  t.set_contiguous_strides();
  return t;
}

std::string_view safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::fp8_e4m3: return "F8_E4M3";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
    case DType::u8: return "U8";
  }
  return "?";
}

bool parse_safetensors_dtype(std::string_view name, DType& out) {
  static constexpr DType all[] = {DType::f32, DType::bf16, DType::f16, DType::fp8_e4m3,
                                  DType::i32, DType::i64,  DType::u8};
  for (DType t : all) {
    if (safetensors_dtype_name(t) == name) {
      out = t;
      return true;
    }
  }
  return false;
}

size_t TensorSpec::nbytes() const {
  uint64_t n = 0;
  return byte_size(shape, dtype_size(dtype), n) ? size_t(n) : 0;
}

// ---- SafeTensorsFile ----------------------------------------------------------------------------

SafeTensorsFile::SafeTensorsFile(SafeTensorsFile&& o) noexcept
    : path_(std::move(o.path_)),
      map_(std::exchange(o.map_, nullptr)),
      map_size_(std::exchange(o.map_size_, 0)),
      tensors_(std::move(o.tensors_)),
      index_(std::move(o.index_)),
      metadata_(std::move(o.metadata_)) {}

SafeTensorsFile& SafeTensorsFile::operator=(SafeTensorsFile&& o) noexcept {
  if (this != &o) {
    unmap();
    path_ = std::move(o.path_);
    map_ = std::exchange(o.map_, nullptr);
    map_size_ = std::exchange(o.map_size_, 0);
    tensors_ = std::move(o.tensors_);
    index_ = std::move(o.index_);
    metadata_ = std::move(o.metadata_);
  }
  return *this;
}

SafeTensorsFile::~SafeTensorsFile() {
  unmap();
}

void SafeTensorsFile::unmap() {
  if (map_) ::munmap(map_, map_size_);
  map_ = nullptr;
  map_size_ = 0;
}

const SafeTensor* SafeTensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Result<SafeTensorsFile> SafeTensorsFile::open(const fs::path& file) {
  const std::string fname = file.string();
  const int fd = ::open(fname.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return not_found(fname + ": no such file");
    return io_error(fname + ": cannot open: " + errno_text());
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string e = errno_text();
    ::close(fd);
    return io_error(fname + ": cannot stat: " + e);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument(fname + ": not a regular file");
  }
  const uint64_t file_size = uint64_t(st.st_size);
  if (file_size < 8) {
    ::close(fd);
    return corrupt(fname + ": truncated safetensors file (" + std::to_string(file_size) +
                   " bytes, less than the 8-byte header length)");
  }
  void* map = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
  const std::string map_err = map == MAP_FAILED ? errno_text() : "";
  ::close(fd);  // the mapping keeps the file alive
  if (map == MAP_FAILED) return io_error(fname + ": mmap failed: " + map_err);

  SafeTensorsFile f;
  f.path_ = file;
  f.map_ = map;
  f.map_size_ = file_size;
  const auto* bytes = static_cast<const unsigned char*>(map);

  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  if (header_len > file_size - 8)
    return corrupt(fname + ": header length " + std::to_string(header_len) +
                   " is past the end of the file (" + std::to_string(file_size) +
                   " bytes): truncated or not a safetensors file");
  if (header_len > kMaxHeaderBytes)
    return corrupt(fname + ": header length " + std::to_string(header_len) + " exceeds the 100 MB limit");
  if (header_len < 2) return corrupt(fname + ": header is not a JSON object");
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = file_size - data_start;
  const auto* data = bytes + data_start;

  simdjson::dom::parser parser;
  simdjson::padded_string header(reinterpret_cast<const char*>(bytes + 8), size_t(header_len));
  simdjson::dom::element doc;
  if (auto err = parser.parse(header).get(doc))
    return corrupt(fname + ": header is not valid JSON (" + simdjson::error_message(err) + ")");
  simdjson::dom::object root;
  if (doc.get_object().get(root)) return corrupt(fname + ": header is not a JSON object");

  struct Span {
    uint64_t begin, end;
    size_t tensor;
  };
  std::vector<Span> spans;
  for (auto field : root) {
    const std::string_view key = field.key;
    if (key == "__metadata__") {
      simdjson::dom::object meta;
      if (field.value.get_object().get(meta)) return corrupt(fname + ": __metadata__ is not an object");
      for (auto m : meta) {
        std::string_view v;
        if (m.value.get_string().get(v))
          return corrupt(fname + ": __metadata__ value of '" + std::string(m.key) + "' is not a string");
        f.metadata_[std::string(m.key)] = std::string(v);
      }
      continue;
    }
    const std::string where = fname + ": tensor '" + std::string(key) + "'";
    if (f.index_.count(key)) return corrupt(where + " appears twice in the header");
    simdjson::dom::object info;
    if (field.value.get_object().get(info)) return corrupt(where + ": header entry is not an object");

    SafeTensor t;
    t.name = std::string(key);
    t.file = fname;
    std::string_view dtype_str;
    if (info["dtype"].get_string().get(dtype_str))
      return corrupt(where + ": missing or non-string \"dtype\"");
    if (!parse_safetensors_dtype(dtype_str, t.dtype))
      return unsupported(where + ": unknown or unsupported dtype '" + std::string(dtype_str) +
                         "' (supported: F32, BF16, F16, F8_E4M3, I32, I64, U8)");
    simdjson::dom::array shape;
    if (info["shape"].get_array().get(shape)) return corrupt(where + ": missing or non-array \"shape\"");
    for (auto d : shape) {
      int64_t v = 0;
      if (d.get_int64().get(v) || v < 0)
        return corrupt(where + ": shape has a non-integer or negative dimension");
      t.shape.push_back(v);
    }
    simdjson::dom::array offsets;
    if (info["data_offsets"].get_array().get(offsets) || offsets.size() != 2)
      return corrupt(where + ": \"data_offsets\" must be [begin, end]");
    uint64_t begin = 0, end = 0;
    if (offsets.at(0).get_uint64().get(begin) || offsets.at(1).get_uint64().get(end))
      return corrupt(where + ": \"data_offsets\" must be non-negative integers");
    uint64_t expected = 0;
    if (!byte_size(t.shape, dtype_size(t.dtype), expected))
      return corrupt(where + ": shape " + shape_string(t.shape) + " is too large");
    if (end < begin)
      return corrupt(where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                     "] end before begin");
    if (end - begin != expected)
      return corrupt(where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                     "] hold " + std::to_string(end - begin) + " bytes but " + std::string(dtype_str) + " " +
                     shape_string(t.shape) + " needs " + std::to_string(expected));
    if (end > data_size)
      return corrupt(where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                     "] run past the end of the data (" + std::to_string(data_size) +
                     " bytes): the file is truncated");
    t.data = data + begin;
    t.nbytes = size_t(expected);
    spans.push_back({begin, end, f.tensors_.size()});
    f.index_.emplace(t.name, f.tensors_.size());
    f.tensors_.push_back(std::move(t));
  }

  // No two tensors may share bytes (zero-sized tensors occupy nothing).
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t prev_end = 0;
  const Span* prev = nullptr;
  for (const Span& s : spans) {
    if (s.begin == s.end) continue;
    if (prev && s.begin < prev_end)
      return corrupt(fname + ": tensors '" + f.tensors_[prev->tensor].name + "' and '" +
                     f.tensors_[s.tensor].name + "' have overlapping data_offsets");
    prev = &s;
    prev_end = s.end;
  }
  return f;
}

// ---- WeightStore --------------------------------------------------------------------------------

namespace {

Result<std::string> read_text_file(const fs::path& p) {
  FILE* fp = std::fopen(p.c_str(), "rb");
  if (!fp)
    return errno == ENOENT ? not_found(p.string() + ": no such file")
                           : io_error(p.string() + ": cannot open: " + errno_text());
  std::string s;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, fp)) > 0) s.append(buf, n);
  const bool bad = std::ferror(fp);
  std::fclose(fp);
  if (bad) return io_error(p.string() + ": read error");
  return s;
}

}  // namespace

Result<WeightStore> WeightStore::open(const fs::path& model_dir) {
  WeightStore ws;
  ws.dir_ = model_dir;
  const fs::path index_path = model_dir / "model.safetensors.index.json";
  const fs::path single = model_dir / "model.safetensors";
  std::error_code ec;
  if (fs::exists(index_path, ec)) {
    ASTRAI_ASSIGN_OR_RETURN(std::string text, read_text_file(index_path));
    const std::string iname = index_path.string();
    simdjson::dom::parser parser;
    simdjson::dom::element doc;
    if (auto err = parser.parse(simdjson::padded_string(text)).get(doc))
      return corrupt(iname + ": not valid JSON (" + simdjson::error_message(err) + ")");
    simdjson::dom::object weight_map;
    if (doc["weight_map"].get_object().get(weight_map))
      return corrupt(iname + ": missing \"weight_map\" object");
    // shard file name -> tensors the index puts there
    std::map<std::string, std::vector<std::string>> shards;
    for (auto e : weight_map) {
      std::string_view shard;
      if (e.value.get_string().get(shard))
        return corrupt(iname + ": weight_map entry '" + std::string(e.key) + "' is not a file name");
      if (shard.empty() || shard.find('/') != std::string_view::npos || shard == "." || shard == "..")
        return corrupt(iname + ": weight_map entry '" + std::string(e.key) + "' names a bad shard '" +
                       std::string(shard) + "'");
      shards[std::string(shard)].emplace_back(e.key);
    }
    if (shards.empty()) return corrupt(iname + ": weight_map is empty");
    ws.files_.reserve(shards.size());
    for (auto& [shard, names] : shards) {
      const fs::path p = model_dir / shard;
      if (!fs::exists(p, ec))
        return not_found(iname + ": shard '" + shard + "' (holding tensor '" + names.front() +
                         "') does not exist in " + model_dir.string());
      ASTRAI_ASSIGN_OR_RETURN(SafeTensorsFile f, SafeTensorsFile::open(p));
      for (const std::string& n : names)
        if (!f.find(n))
          return corrupt(p.string() + ": tensor '" + n +
                         "' is listed in model.safetensors.index.json but missing from " + shard);
      ws.files_.push_back(std::move(f));
      if (!ws.looked_in_.empty()) ws.looked_in_ += ", ";
      ws.looked_in_ += shard;
    }
    // The index is authoritative: a name resolves to the shard it names.
    for (const SafeTensorsFile& f : ws.files_)
      for (const SafeTensor& t : f.tensors()) ws.index_.emplace(t.name, &t);
    for (auto e : weight_map) {
      std::string_view shard;
      if (e.value.get_string().get(shard)) continue;  // checked above
      for (const SafeTensorsFile& f : ws.files_)
        if (f.path().filename() == shard) ws.index_[std::string(e.key)] = f.find(e.key);
    }
  } else if (fs::exists(single, ec)) {
    ASTRAI_ASSIGN_OR_RETURN(SafeTensorsFile f, SafeTensorsFile::open(single));
    ws.files_.push_back(std::move(f));
    for (const SafeTensor& t : ws.files_.back().tensors()) ws.index_.emplace(t.name, &t);
    ws.looked_in_ = "model.safetensors";
  } else {
    if (!fs::is_directory(model_dir, ec)) return not_found(model_dir.string() + ": no such directory");
    std::string found;
    for (const char* other :
         {"pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt", "consolidated.00.pth"})
      if (found.empty() && fs::exists(model_dir / other, ec)) found = other;
    if (!found.empty())
      return unsupported(model_dir.string() + ": " + found +
                         " is PyTorch's pickle format, which astrai does not read; save the model as "
                         "safetensors (transformers: model.save_pretrained(dir, safe_serialization=True))");
    return not_found(model_dir.string() + ": no model.safetensors or model.safetensors.index.json");
  }
  return ws;
}

const SafeTensor* WeightStore::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

Result<const SafeTensor*> WeightStore::get(std::string_view name,
                                           const std::vector<int64_t>& expected_shape) const {
  const SafeTensor* t = find(name);
  if (!t)
    return not_found("missing tensor '" + std::string(name) + "' (looked in " + looked_in_ + " in " +
                     dir_.string() + ")");
  if (t->shape != expected_shape)
    return invalid_argument(fs::path(t->file).filename().string() + ": tensor '" + t->name + "' has shape " +
                            t->shape_str() + ", expected " + shape_string(expected_shape));
  return t;
}

Result<const SafeTensor*> WeightStore::get(std::string_view name,
                                           std::initializer_list<int64_t> expected_shape) const {
  return get(name, std::vector<int64_t>(expected_shape));
}

std::vector<std::string> WeightStore::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(index_.size());
  for (const auto& [n, t] : index_) names.push_back(n);
  return names;
}

// ---- writer -------------------------------------------------------------------------------------

namespace {

// Writes all of buf or fails.
bool write_all(int fd, const void* buf, size_t n) {
  const char* p = static_cast<const char*>(buf);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t(1) << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= size_t(w);
  }
  return true;
}

// source(i, scratch) returns tensor i's bytes: either its own pointer or scratch, filled.
using TensorSource = std::function<Result<const void*>(size_t, std::vector<char>&)>;

Status write_impl(const fs::path& file, const std::vector<TensorSpec>& tensors, const TensorSource& source,
                  const std::map<std::string, std::string>& metadata) {
  const std::string fname = file.string();
  std::set<std::string_view> seen;
  JsonWriter w;
  w.begin_object();
  if (!metadata.empty()) {
    w.key("__metadata__").begin_object();
    for (const auto& [k, v] : metadata) w.key(k).value(v);
    w.end_object();
  }
  // Data in order of decreasing element size (stable), as the reference writer does: with the
  // 8-byte header padding every tensor then starts at a multiple of its element size.
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return dtype_size(tensors[a].dtype) > dtype_size(tensors[b].dtype);
  });
  std::vector<uint64_t> sizes(tensors.size());
  uint64_t offset = 0;
  for (size_t i : order) {
    const TensorSpec& t = tensors[i];
    if (t.name.empty() || t.name == "__metadata__")
      return invalid_argument(fname + ": bad tensor name '" + t.name + "'");
    if (!seen.insert(t.name).second) return invalid_argument(fname + ": tensor '" + t.name + "' given twice");
    uint64_t n = 0;
    if (!byte_size(t.shape, dtype_size(t.dtype), n))
      return invalid_argument(fname + ": tensor '" + t.name + "' has a bad shape " + shape_string(t.shape));
    w.key(t.name).begin_object();
    w.key("dtype").value(safetensors_dtype_name(t.dtype));
    w.key("shape").begin_array();
    for (int64_t d : t.shape) w.value(d);
    w.end_array();
    w.key("data_offsets").begin_array().value(offset).value(offset + n).end_array();
    w.end_object();
    sizes[i] = n;
    offset += n;
  }
  w.end_object();
  std::string header = w.take();
  header.append((8 - header.size() % 8) % 8, ' ');
  unsigned char len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>(uint64_t(header.size()) >> (8 * i));

  static std::atomic<uint64_t> counter{0};  // unique temp name per process and call
  const fs::path tmp = file.parent_path() / (file.filename().string() + ".tmp." + std::to_string(::getpid()) +
                                             "." + std::to_string(counter++));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error(fname + ": cannot create " + tmp.string() + ": " + errno_text());
  auto fail = [&](Status s) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  };
  if (!write_all(fd, len_bytes, 8) || !write_all(fd, header.data(), header.size()))
    return fail(io_error(fname + ": write failed: " + errno_text()));
  std::vector<char> buf;
  for (size_t i : order) {
    if (sizes[i] == 0) continue;
    auto src = source(i, buf);
    if (!src.ok()) return fail(src.status());
    if (!write_all(fd, src.value(), size_t(sizes[i])))
      return fail(io_error(fname + ": write of tensor '" + tensors[i].name + "' failed: " + errno_text()));
  }
  // No fsync (as HF's save_file and torch.save): the rename makes the file appear complete or not
  // at all to readers and after a process crash; forcing gigabytes to disk would multiply the
  // time of `astrai init` on slow disks for protection only against power loss.
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return io_error(fname + ": close failed: " + errno_text());
  }
  if (::rename(tmp.c_str(), file.c_str()) != 0) {
    const std::string e = errno_text();
    ::unlink(tmp.c_str());
    return io_error(fname + ": cannot rename the finished file into place: " + e);
  }
  return {};
}

}  // namespace

Status write_safetensors(const fs::path& file, const std::vector<TensorSpec>& tensors,
                         const TensorFiller& fill, const std::map<std::string, std::string>& metadata) {
  return write_impl(
      file, tensors,
      [&](size_t i, std::vector<char>& buf) -> Result<const void*> {
        buf.resize(tensors[i].nbytes());
        Status s = fill(i, buf.data(), buf.size());
        if (!s.ok()) return s;
        return static_cast<const void*>(buf.data());
      },
      metadata);
}

Status write_safetensors(const fs::path& file, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSpec> specs;
  specs.reserve(tensors.size());
  for (const TensorToWrite& t : tensors) {
    if (!t.data && TensorSpec{t.name, t.dtype, t.shape}.nbytes() > 0)
      return invalid_argument(file.string() + ": tensor '" + t.name + "' has no data");
    specs.push_back({t.name, t.dtype, t.shape});
  }
  return write_impl(
      file, specs, [&](size_t i, std::vector<char>&) -> Result<const void*> { return tensors[i].data; },
      metadata);
}

}  // namespace astrai
