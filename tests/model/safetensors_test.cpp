// safetensors: our reader/writer against each other, against an independent Python
// implementation (tests/model/st_io.py), and on damaged files.
#include "src/model/safetensors.h"

#include <simdjson.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <random>

#include "tools/test_util.h"

namespace fs = std::filesystem;
using namespace astrai;
using astrai::test::TempDir;

namespace {

// A tensor's elements widened to double, as st_io.py prints them.
std::vector<double> widen(const SafeTensor& t) {
  std::vector<double> v(size_t(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    const char* p = static_cast<const char*>(t.data) + i * dtype_size(t.dtype);
    switch (t.dtype) {
      case DType::f32: {
        float f;
        std::memcpy(&f, p, 4);
        v[i] = f;
        break;
      }
      case DType::bf16: {
        uint16_t h;
        std::memcpy(&h, p, 2);
        v[i] = bf16_to_f32(h);
        break;
      }
      case DType::f16: {
        uint16_t h;
        std::memcpy(&h, p, 2);
        v[i] = f16_to_f32(h);
        break;
      }
      case DType::i32: {
        int32_t x;
        std::memcpy(&x, p, 4);
        v[i] = x;
        break;
      }
      case DType::i64: {
        int64_t x;
        std::memcpy(&x, p, 8);
        v[i] = double(x);
        break;
      }
      case DType::u8: v[i] = static_cast<unsigned char>(*p); break;
      case DType::fp8_e4m3: v[i] = static_cast<unsigned char>(*p); break;
    }
  }
  return v;
}

// Random tensors of every dtype astrai reads, with their bytes.
struct Owned {
  std::vector<TensorToWrite> tensors;
  std::vector<std::vector<unsigned char>> bytes;
};
Owned random_tensors(uint64_t seed) {
  std::mt19937_64 rng(seed);
  Owned o;
  const DType types[] = {DType::f32, DType::bf16, DType::f16,     DType::i32,
                         DType::i64, DType::u8,   DType::fp8_e4m3};
  int i = 0;
  for (DType t : types) {
    std::vector<int64_t> shape;
    const int nd = int(rng() % 4);  // 0-d scalars too
    for (int d = 0; d < nd; ++d) shape.push_back(int64_t(rng() % 7 + 1));
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<unsigned char> b(size_t(n) * dtype_size(t));
    for (auto& x : b) x = static_cast<unsigned char>(rng());
    if (t == DType::f32)  // finite values so comparisons are exact
      for (int64_t k = 0; k < n; ++k) {
        float f = std::normal_distribution<float>(0, 3)(rng);
        std::memcpy(&b[size_t(k) * 4], &f, 4);
      }
    if (t == DType::bf16 || t == DType::f16)
      for (int64_t k = 0; k < n; ++k) {
        float f = std::normal_distribution<float>(0, 3)(rng);
        uint16_t h = t == DType::bf16 ? f32_to_bf16(f) : f32_to_f16(f);
        std::memcpy(&b[size_t(k) * 2], &h, 2);
      }
    o.bytes.push_back(std::move(b));
    o.tensors.push_back({"t" + std::to_string(i++) + "." + std::string(dtype_name(t)), t, shape, nullptr});
  }
  o.tensors.push_back({"empty", DType::f32, {0, 3}, nullptr});
  o.bytes.emplace_back();
  for (size_t k = 0; k < o.tensors.size(); ++k) o.tensors[k].data = o.bytes[k].data();
  return o;
}

// A file from a header text and data bytes; header_len overrides the length field.
void write_raw(const fs::path& p, const std::string& header, const std::string& data,
               int64_t header_len = -1) {
  uint64_t n = header_len < 0 ? header.size() : uint64_t(header_len);
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char((n >> (8 * i)) & 0xff);
  astrai::test::write_file(p, s + header + data);
}

std::string error_of(const fs::path& p) {
  auto r = SafeTensorsFile::open(p);
  REQUIRE_FALSE(r.ok());
  return r.status().message();
}

// The tensors of st_io.py's JSON: name -> (dtype, shape, values).
struct PyTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<double> values;
};
std::map<std::string, PyTensor> parse_py(const std::string& json, uint64_t* header_len = nullptr,
                                         std::map<std::string, std::string>* meta = nullptr) {
  // Named locals throughout: gcc 12 warns about simdjson results chained on temporaries.
  simdjson::dom::parser parser;
  simdjson::padded_string text(json);
  simdjson::dom::element doc;
  REQUIRE_FALSE(parser.parse(text).get(doc));
  if (header_len) REQUIRE_FALSE(doc["header_len"].get_uint64().get(*header_len));
  simdjson::dom::object metadata, tensors;
  REQUIRE_FALSE(doc["metadata"].get_object().get(metadata));
  REQUIRE_FALSE(doc["tensors"].get_object().get(tensors));
  if (meta)
    for (auto m : metadata) {
      std::string_view v;
      REQUIRE_FALSE(m.value.get_string().get(v));
      (*meta)[std::string(m.key)] = std::string(v);
    }
  std::map<std::string, PyTensor> out;
  for (auto f : tensors) {
    PyTensor t;
    simdjson::dom::object o;
    simdjson::dom::array shape, values;
    std::string_view dtype;
    REQUIRE_FALSE(f.value.get_object().get(o));
    REQUIRE_FALSE(o["dtype"].get_string().get(dtype));
    REQUIRE_FALSE(o["shape"].get_array().get(shape));
    REQUIRE_FALSE(o["values"].get_array().get(values));
    t.dtype = std::string(dtype);
    for (auto d : shape) t.shape.push_back(int64_t(d));
    for (auto x : values) t.values.push_back(double(x));
    out[std::string(f.key)] = std::move(t);
  }
  return out;
}

std::string st_io() {
  return (astrai::test::source_dir() / "tests/model/st_io.py").string();
}

}  // namespace

TEST_CASE("safetensors round trip keeps every dtype, shape, byte and the metadata", "[unit]") {
  const uint64_t seed = astrai::test::fresh_seed();
  INFO("seed " << seed);
  TempDir dir("st");
  Owned o = random_tensors(seed);
  REQUIRE(write_safetensors(dir / "a.safetensors", o.tensors, {{"format", "pt"}, {"note", "x\"y"}}).ok());
  auto f = SafeTensorsFile::open(dir / "a.safetensors");
  REQUIRE(f.ok());
  REQUIRE(f->tensors().size() == o.tensors.size());
  CHECK(f->metadata().at("note") == "x\"y");
  for (size_t i = 0; i < o.tensors.size(); ++i) {
    const SafeTensor* t = f->find(o.tensors[i].name);
    REQUIRE(t);
    CHECK(t->dtype == o.tensors[i].dtype);
    CHECK(t->shape == o.tensors[i].shape);
    REQUIRE(t->nbytes == o.bytes[i].size());
    if (t->nbytes) CHECK(std::memcmp(t->data, o.bytes[i].data(), t->nbytes) == 0);
    // Header padded to 8 bytes and tensors ordered by element size, as HF writes them: every
    // tensor is aligned to its element size in memory.
    CHECK(reinterpret_cast<uintptr_t>(t->data) % dtype_size(t->dtype) == 0);
    CHECK(t->file == (dir / "a.safetensors").string());
  }
  CHECK(f->find("nope") == nullptr);
  // Nothing but the finished file is left in the directory (temp file renamed away).
  CHECK(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()) == 1);
}

TEST_CASE("safetensors files are movable and keep their tensors valid", "[unit]") {
  TempDir dir("st");
  float x[3] = {1, 2, 3};
  REQUIRE(write_safetensors(dir / "m.safetensors", {{"x", DType::f32, {3}, x}}).ok());
  SafeTensorsFile a = SafeTensorsFile::open(dir / "m.safetensors").value();
  const void* p = a.find("x")->data;
  SafeTensorsFile b = std::move(a);
  REQUIRE(b.find("x"));
  CHECK(b.find("x")->data == p);
  CHECK(static_cast<const float*>(p)[2] == 3.0f);
}

TEST_CASE("a file written by the Python reference is read with the same values", "[integration]") {
  const uint64_t seed = astrai::test::fresh_seed() % 1000000;
  INFO("seed " << seed);
  TempDir dir("st");
  const fs::path padded = dir / "py.safetensors", unpadded = dir / "py-nopad.safetensors";
  auto r = astrai::test::run_command(astrai::test::python3() + " " + st_io() + " write " + padded.string() +
                                     " " + std::to_string(seed) + " " + unpadded.string());
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  uint64_t header_len = 0;
  std::map<std::string, std::string> meta;
  auto expected = parse_py(r.out, &header_len, &meta);
  CHECK(header_len % 8 == 0);
  for (const fs::path& p : {padded, unpadded}) {
    INFO(p);
    auto f = SafeTensorsFile::open(p);
    REQUIRE(f.ok());
    CHECK(f->metadata() == meta);
    REQUIRE(f->tensors().size() == expected.size());
    for (auto& [name, e] : expected) {
      const SafeTensor* t = f->find(name);
      REQUIRE(t);
      CHECK(safetensors_dtype_name(t->dtype) == e.dtype);
      CHECK(t->shape == e.shape);
      CHECK(widen(*t) == e.values);
    }
  }
}

TEST_CASE("a file we write is read by the Python reference with the same values", "[integration]") {
  const uint64_t seed = astrai::test::fresh_seed();
  INFO("seed " << seed);
  TempDir dir("st");
  Owned o = random_tensors(seed);
  // st_io.py's numpy has no float8 (fp8 bytes are compared in the round trip above).
  o.tensors.erase(std::remove_if(o.tensors.begin(), o.tensors.end(),
                                 [](const TensorToWrite& t) { return t.dtype == DType::fp8_e4m3; }),
                  o.tensors.end());
  const fs::path p = dir / "ours.safetensors";
  REQUIRE(write_safetensors(p, o.tensors, {{"format", "pt"}}).ok());
  auto r = astrai::test::run_command(astrai::test::python3() + " " + st_io() + " dump " + p.string());
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  uint64_t header_len = 0;
  std::map<std::string, std::string> meta;
  auto py = parse_py(r.out, &header_len, &meta);
  CHECK(header_len % 8 == 0);
  CHECK(meta == std::map<std::string, std::string>{{"format", "pt"}});
  auto f = SafeTensorsFile::open(p).value();
  REQUIRE(py.size() == o.tensors.size());
  for (const TensorToWrite& t : o.tensors) {
    REQUIRE(py.count(t.name));
    const PyTensor& e = py[t.name];
    CHECK(e.dtype == safetensors_dtype_name(t.dtype));
    CHECK(e.shape == t.shape);
    CHECK(e.values == widen(*f.find(t.name)));
  }
}

TEST_CASE("damaged safetensors files give errors naming the file and the tensor", "[unit]") {
  TempDir dir("st");
  const fs::path p = dir / "bad.safetensors";
  const std::string f = p.string();
  const std::string ok_header = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  const std::string data16(16, '\1');

  SECTION("missing file") {
    std::string e = error_of(dir / "none.safetensors");
    CHECK_THAT(e, Catch::Contains("none.safetensors"));
  }
  SECTION("shorter than the length field") {
    astrai::test::write_file(p, "abc");
    CHECK_THAT(error_of(p), Catch::Contains(f) && Catch::Contains("truncated"));
  }
  SECTION("header length past the end of the file") {
    write_raw(p, ok_header, data16, 1 << 20);
    CHECK_THAT(error_of(p), Catch::Contains(f) && Catch::Contains("past the end"));
  }
  SECTION("header that is not JSON") {
    write_raw(p, R"({"w":{"dtype":"F32",)", data16);
    CHECK_THAT(error_of(p), Catch::Contains(f) && Catch::Contains("JSON"));
  }
  SECTION("truncated data") {
    write_raw(p, ok_header, data16.substr(0, 10));
    CHECK_THAT(error_of(p), Catch::Contains(f) && Catch::Contains("'w'") && Catch::Contains("truncated"));
  }
  SECTION("offsets that do not match shape * dtype size") {
    write_raw(p, R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,16]}})", data16);
    CHECK_THAT(error_of(p), Catch::Contains(f) && Catch::Contains("'w'") && Catch::Contains("needs 24"));
  }
  SECTION("offsets end before they begin") {
    write_raw(p, R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[8,4]}})", data16);
    CHECK_THAT(error_of(p), Catch::Contains(f) && Catch::Contains("'w'"));
  }
  SECTION("overlapping tensors") {
    write_raw(p,
              R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
              R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
              data16);
    CHECK_THAT(error_of(p), Catch::Contains(f) && Catch::Contains("'a'") && Catch::Contains("'b'") &&
                                Catch::Contains("overlapping"));
  }
  SECTION("unknown dtype") {
    write_raw(p, R"({"w":{"dtype":"Q4","shape":[16],"data_offsets":[0,16]}})", data16);
    CHECK_THAT(error_of(p), Catch::Contains(f) && Catch::Contains("'w'") && Catch::Contains("'Q4'"));
  }
  SECTION("negative or fractional dimension") {
    write_raw(p, R"({"w":{"dtype":"U8","shape":[-16],"data_offsets":[0,16]}})", data16);
    CHECK_THAT(error_of(p), Catch::Contains(f) && Catch::Contains("'w'"));
    write_raw(p, R"({"w":{"dtype":"U8","shape":[1.5],"data_offsets":[0,16]}})", data16);
    CHECK_THAT(error_of(p), Catch::Contains(f) && Catch::Contains("'w'"));
  }
  SECTION("missing fields and wrong types") {
    write_raw(p, R"({"w":{"shape":[4],"data_offsets":[0,16]}})", data16);
    CHECK_THAT(error_of(p), Catch::Contains("'w'") && Catch::Contains("dtype"));
    write_raw(p, R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0]}})", data16);
    CHECK_THAT(error_of(p), Catch::Contains("'w'") && Catch::Contains("data_offsets"));
    write_raw(p, R"([1,2])", data16);
    CHECK_THAT(error_of(p), Catch::Contains(f) && Catch::Contains("object"));
  }
  SECTION("a directory is not a file") {
    CHECK_THAT(error_of(dir.path()), Catch::Contains(dir.path().string()));
  }
}

TEST_CASE("random bytes never crash the reader", "[unit]") {
  const uint64_t seed = astrai::test::fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  TempDir dir("st");
  // Start from a valid file and flip bytes in its header and length.
  Owned o = random_tensors(seed);
  REQUIRE(write_safetensors(dir / "v.safetensors", o.tensors).ok());
  const std::string good = astrai::test::read_file(dir / "v.safetensors");
  for (int iter = 0; iter < 300; ++iter) {
    std::string s = good;
    const int flips = 1 + int(rng() % 4);
    for (int k = 0; k < flips; ++k) s[rng() % std::min<size_t>(s.size(), 200)] = char(rng());
    if (rng() % 5 == 0) s.resize(rng() % s.size());
    astrai::test::write_file(dir / "x.safetensors", s);
    auto r = SafeTensorsFile::open(dir / "x.safetensors");
    if (r.ok())  // whatever was accepted must lie inside the file
      for (const SafeTensor& t : r->tensors()) CHECK(t.nbytes == size_t(t.numel()) * dtype_size(t.dtype));
  }
}

TEST_CASE("WeightStore finds tensors in model.safetensors and checks shapes", "[unit]") {
  TempDir dir("ws");
  float a[6] = {1, 2, 3, 4, 5, 6};
  REQUIRE(write_safetensors(dir / "model.safetensors", {{"a", DType::f32, {2, 3}, a}}).ok());
  auto ws = WeightStore::open(dir.path());
  REQUIRE(ws.ok());
  CHECK(ws->get("a", {2, 3}).ok());
  auto bad = ws->get("a", {3, 2});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() == "model.safetensors: tensor 'a' has shape [2, 3], expected [3, 2]");
  auto missing = ws->get("b", {1});
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.status().message(),
             Catch::StartsWith("missing tensor 'b' (looked in model.safetensors"));
  CHECK(ws->tensor_names() == std::vector<std::string>{"a"});
}

TEST_CASE("WeightStore follows model.safetensors.index.json across shards", "[unit]") {
  TempDir dir("ws");
  float a[2] = {1, 2}, b[3] = {3, 4, 5};
  REQUIRE(write_safetensors(dir / "model-00001-of-00002.safetensors", {{"a", DType::f32, {2}, a}}).ok());
  REQUIRE(write_safetensors(dir / "model-00002-of-00002.safetensors", {{"b", DType::f32, {3}, b}}).ok());
  const std::string index =
      R"({"metadata":{"total_size":20},"weight_map":{"a":"model-00001-of-00002.safetensors",)"
      R"("b":"model-00002-of-00002.safetensors"}})";
  astrai::test::write_file(dir / "model.safetensors.index.json", index);

  SECTION("both shards present") {
    auto ws = WeightStore::open(dir.path());
    REQUIRE(ws.ok());
    CHECK(static_cast<const float*>(ws->get("b", {3}).value()->data)[2] == 5.0f);
    CHECK(ws->files().size() == 2);
    auto bad = ws->get("b", {4});
    REQUIRE_FALSE(bad.ok());
    CHECK_THAT(bad.status().message(),
               Catch::Contains("model-00002-of-00002.safetensors") && Catch::Contains("'b'"));
    auto missing = ws->get("c", {1});
    REQUIRE_FALSE(missing.ok());
    CHECK_THAT(missing.status().message(), Catch::Contains("'c'") && Catch::Contains("model-00001-of-00002"));
  }
  SECTION("a missing shard") {
    fs::remove(dir / "model-00002-of-00002.safetensors");
    auto ws = WeightStore::open(dir.path());
    REQUIRE_FALSE(ws.ok());
    CHECK_THAT(ws.status().message(),
               Catch::Contains("model-00002-of-00002.safetensors") && Catch::Contains("'b'"));
  }
  SECTION("a shard without the tensor the index puts there") {
    REQUIRE(write_safetensors(dir / "model-00002-of-00002.safetensors", {{"x", DType::f32, {3}, b}}).ok());
    auto ws = WeightStore::open(dir.path());
    REQUIRE_FALSE(ws.ok());
    CHECK_THAT(ws.status().message(),
               Catch::Contains("model-00002-of-00002.safetensors") && Catch::Contains("'b'"));
  }
  SECTION("an index that is not JSON") {
    astrai::test::write_file(dir / "model.safetensors.index.json", "{\"weight_map\": ");
    auto ws = WeightStore::open(dir.path());
    REQUIRE_FALSE(ws.ok());
    CHECK_THAT(ws.status().message(), Catch::Contains("model.safetensors.index.json"));
  }
  SECTION("a shard name that leaves the directory") {
    astrai::test::write_file(dir / "model.safetensors.index.json",
                             R"({"weight_map":{"a":"../x.safetensors"}})");
    auto ws = WeightStore::open(dir.path());
    REQUIRE_FALSE(ws.ok());
    CHECK_THAT(ws.status().message(), Catch::Contains("'a'"));
  }
}

TEST_CASE("WeightStore on a directory without weights says what it looked for", "[unit]") {
  TempDir dir("ws");
  auto ws = WeightStore::open(dir.path());
  REQUIRE_FALSE(ws.ok());
  CHECK_THAT(ws.status().message(),
             Catch::Contains("model.safetensors") && Catch::Contains(dir.path().string()));
  // A PyTorch pickle checkpoint is named, with the way to a safetensors one.
  astrai::test::write_file(dir.path() / "pytorch_model.bin", "not read");
  ws = WeightStore::open(dir.path());
  REQUIRE_FALSE(ws.ok());
  CHECK_THAT(ws.status().message(), Catch::Contains("pytorch_model.bin is PyTorch's pickle format") &&
                                        Catch::Contains("safe_serialization=True"));
}

TEST_CASE("the writer refuses duplicate names and overwrites an existing file atomically", "[unit]") {
  TempDir dir("st");
  float a[1] = {1};
  auto s = write_safetensors(dir / "d.safetensors", {{"a", DType::f32, {1}, a}, {"a", DType::f32, {1}, a}});
  REQUIRE_FALSE(s.ok());
  CHECK_THAT(s.message(), Catch::Contains("'a'"));
  CHECK_FALSE(fs::exists(dir / "d.safetensors"));
  REQUIRE(write_safetensors(dir / "d.safetensors", {{"a", DType::f32, {1}, a}}).ok());
  float b[2] = {7, 8};
  REQUIRE(write_safetensors(dir / "d.safetensors", {{"b", DType::f32, {2}, b}}).ok());
  auto f = SafeTensorsFile::open(dir / "d.safetensors").value();
  CHECK(f.find("a") == nullptr);
  CHECK(static_cast<const float*>(f.find("b")->data)[1] == 8.0f);
  // A failing filler leaves no file behind.
  auto fail = write_safetensors(dir / "e.safetensors", std::vector<TensorSpec>{{"x", DType::f32, {4}}},
                                [](size_t, void*, size_t) { return io_error("generator broke"); });
  CHECK_THAT(fail.message(), Catch::Contains("generator broke"));
  CHECK_FALSE(fs::exists(dir / "e.safetensors"));
  CHECK(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()) == 1);
}
