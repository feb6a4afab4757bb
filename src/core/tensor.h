// Tensor: a non-owning view (pointer, dtype, device, shape, strides in elements).
// Buffer: owned device or host memory; Tensors point into Buffers, mmapped files or workspaces.
#pragma once

#include <array>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>

#include "src/core/dtype.h"

namespace astrai {

enum class Device : uint8_t { cpu, cuda };

constexpr int kMaxDims = 4;

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device = Device::cpu;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> stride{};  // in elements

  Tensor() = default;
  Tensor(void* p, DType t, std::initializer_list<int64_t> dims, Device dev = Device::cpu)
      : data(p), dtype(t), device(dev) {
    assert(dims.size() <= kMaxDims);
    for (int64_t d : dims) shape[ndim++] = d;
    set_contiguous_strides();
  }

  void set_contiguous_strides() {
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; --i) {
      stride[i] = s;
      s *= shape[i];
    }
  }

  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return n;
  }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype); }
  int64_t size(int d) const { return shape[d < 0 ? ndim + d : d]; }
  bool is_contiguous() const {
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; --i) {
      if (shape[i] != 1 && stride[i] != s) return false;
      s *= shape[i];
    }
    return true;
  }

  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }

  // Rows [begin, end) along dim 0 (contiguous in dim 0 by construction).
  Tensor rows(int64_t begin, int64_t end) const {
    Tensor t = *this;
    t.data = static_cast<char*>(data) + begin * stride[0] * int64_t(dtype_size(dtype));
    t.shape[0] = end - begin;
    return t;
  }
  // Columns [begin, end) along dim 1 of a matrix; the row stride stays the parent's.
  Tensor cols(int64_t begin, int64_t end) const {
    assert(ndim == 2 && 0 <= begin && begin <= end && end <= shape[1]);
    Tensor t = *this;
    t.data = static_cast<char*>(data) + begin * stride[1] * int64_t(dtype_size(dtype));
    t.shape[1] = end - begin;
    return t;
  }
  // Same memory, new contiguous shape; numel must match.
  Tensor view(std::initializer_list<int64_t> dims) const {
    Tensor t(data, dtype, dims, device);
    assert(t.numel() == numel() && is_contiguous());
    return t;
  }

  std::string shape_str() const;
};

// A weight matrix as linear takes it: a Tensor of its values and, when they are fp8_e4m3 (an fp8
// checkpoint's matrix kept as it is stored, Backend::keeps_fp8), their scales: the weight is
// values[n, k] * scale[n / block_rows, k / block_cols]. Every other weight is a plain Tensor, which
// converts to a Weight without scales.
struct Weight : Tensor {
  Tensor scale;  // f32 [ceil(N / block_rows), ceil(K / block_cols)], contiguous, on the values' device
  int64_t block_rows = 0, block_cols = 0;

  Weight() = default;
  Weight(const Tensor& t) : Tensor(t) {}  // NOLINT(google-explicit-constructor): any Tensor is a weight
};

// Owning allocation. The deleter knows the device (host free, cudaFree, munmap...).
class Buffer {
 public:
  Buffer() = default;
  Buffer(void* p, size_t n, Device dev, std::function<void(void*)> deleter)
      : ptr_(p), size_(n), device_(dev), deleter_(std::move(deleter)) {}
  Buffer(Buffer&& o) noexcept { swap(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      swap(o);
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }

  // Host memory aligned to 64 bytes, zero-initialised.
  static Buffer host(size_t bytes);

  void* data() const { return ptr_; }
  size_t size() const { return size_; }
  Device device() const { return device_; }
  Tensor as(DType t, std::initializer_list<int64_t> dims) const {
    Tensor v(ptr_, t, dims, device_);
    assert(v.nbytes() <= size_);
    return v;
  }

  void reset() {
    if (ptr_ && deleter_) deleter_(ptr_);
    ptr_ = nullptr;
    size_ = 0;
  }

 private:
  void swap(Buffer& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(size_, o.size_);
    std::swap(device_, o.device_);
    std::swap(deleter_, o.deleter_);
  }
  void* ptr_ = nullptr;
  size_t size_ = 0;
  Device device_ = Device::cpu;
  std::function<void(void*)> deleter_;
};

}  // namespace astrai
