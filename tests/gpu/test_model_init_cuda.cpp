// test_model_init_cuda.cpp — parameter initialisation on the GPU: the whole model and uneven slices of the
// flat buffer initialised on the device give the CPU's values bit for bit (model/init.h), as does a
// TransformerLM built on the GPU; building one with a head dim the flash kernels lack fails at once.
// Run on a GPU machine: ./build/bin/gpu_test_model_init_cuda
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/buffer.h"
#include "core/error.h"
#include "core/tensor_io.h"
#include "model/init.h"
#include "model/transformer.h"

namespace ft {
namespace {

// The element bits of an fp32 tensor on any device.
std::vector<std::uint32_t> bits_of(const Tensor& t) {
  OwnedTensor host({t.numel()}, DType::f32, Device::cpu(), "host copy");
  copy(host, t.reshape({t.numel()}));
  std::vector<std::uint32_t> out(static_cast<std::size_t>(t.numel()));
  std::memcpy(out.data(), host->data(), out.size() * sizeof(std::uint32_t));
  return out;
}

TEST(InitCuda, WholeModelAndSlicesEqualTheCpu) {
  ModelConfig c = model_config("tiny");
  c.vocab_size = 1001;
  const ParameterLayout layout(c);
  const ParameterBuffer cpu(layout, DType::f32, Device::cpu(), "test");
  init_parameters(layout, cpu, 5);
  const std::vector<std::uint32_t> expected = bits_of(cpu.flat());

  const ParameterBuffer gpu(layout, DType::f32, Device::cuda(0), "test");
  init_parameters(layout, gpu, 5);
  EXPECT_EQ(bits_of(gpu.flat()), expected);

  const std::int64_t sizes[] = {3, 100003, 17, 4096, 77777};
  std::int64_t begin = 0;
  for (std::size_t i = 0; begin < layout.numel(); ++i) {
    const std::int64_t n = std::min(sizes[i % std::size(sizes)], layout.numel() - begin);
    OwnedTensor slice({n}, DType::f32, Device::cuda(0), "slice");
    init_parameters_range(layout, slice, begin, 5);
    const std::vector<std::uint32_t> got = bits_of(slice);
    ASSERT_TRUE(std::equal(got.begin(), got.end(), expected.begin() + begin))
        << "slice [" << begin << ", " << begin + n << ")";
    begin += n;
  }
}

TEST(InitCuda, ModelOnTheGpuStartsFromTheCpuParameters) {
  ModelOptions o;
  o.seed = 9;
  o.max_batch = 1;
  const TransformerLM host(model_config("tiny"), o);
  o.device = Device::cuda(0);
  const TransformerLM device(model_config("tiny"), o);
  EXPECT_EQ(bits_of(device.parameters().flat()), bits_of(host.parameters().flat()));
}

TEST(InitCuda, AHeadDimTheFlashKernelsLackFailsAtConstruction) {
  ModelConfig c = model_config("tiny");
  c.d_model = 96;
  c.num_heads = 2;  // head dim 48: fine on the CPU, not one of the CUDA flash kernels'
  ModelOptions o;
  o.max_batch = 1;
  EXPECT_NO_THROW((TransformerLM{c, o}));
  o.device = Device::cuda(0);
  try {
    TransformerLM model(c, o);
    ADD_FAILURE() << "expected ft::Error for head dim 48";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unsupported);
    EXPECT_NE(e.message().find("unsupported head dim 48"), std::string::npos) << e.message();
  }
  o.attention = AttentionImpl::naive;
  EXPECT_NO_THROW((TransformerLM{c, o}));
}

}  // namespace
}  // namespace ft
