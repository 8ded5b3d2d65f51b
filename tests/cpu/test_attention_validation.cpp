// test_attention_validation.cpp — every malformed attention call raises ft::Error of the documented
// kind, with a message naming what was expected and what was given.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/error.h"
#include "core/tensor_io.h"
#include "ops/attention.h"

namespace ft {
namespace {

constexpr std::int64_t B = 2, Hq = 4, Hkv = 2, Nq = 5, Nk = 6, D = 8;

// A valid call (with sink logits) whose tensors a case then breaks. Replacement tensors are views
// of `scratch`, large enough for any of them, so a check that wrongly passes cannot crash.
struct Call {
  OwnedTensor q{{B, Hq, Nq, D}, DType::f32, Device::cpu(), "test"};
  OwnedTensor k{{B, Hkv, Nk, D}, DType::f32, Device::cpu(), "test"};
  OwnedTensor v{{B, Hkv, Nk, D}, DType::f32, Device::cpu(), "test"};
  OwnedTensor o{{B, Hq, Nq, D}, DType::f32, Device::cpu(), "test"};
  OwnedTensor lse{{B, Hq, Nq}, DType::f32, Device::cpu(), "test"};
  OwnedTensor sinks{{Hq}, DType::f32, Device::cpu(), "test"};
  OwnedTensor d_o{{B, Hq, Nq, D}, DType::f32, Device::cpu(), "test"};
  OwnedTensor dq{{B, Hq, Nq, D}, DType::f32, Device::cpu(), "test"};
  OwnedTensor dk{{B, Hkv, Nk, D}, DType::f32, Device::cpu(), "test"};
  OwnedTensor dv{{B, Hkv, Nk, D}, DType::f32, Device::cpu(), "test"};
  OwnedTensor dsinks{{Hq}, DType::f32, Device::cpu(), "test"};
  OwnedTensor scratch{{1 << 14}, DType::f32, Device::cpu(), "test"};

  AttentionTensors t{q, k, v, sinks, o, lse};
  AttentionGrads g{d_o, dq, dk, dv, dsinks};
  AttentionOptions options;

  Call() {
    for (const OwnedTensor* x : {&q, &k, &v, &d_o, &scratch}) fill_normal(*x, 1);
    fill_constant(sinks, 0.0);
  }
  // A view of scratch with the given dtype, device, shape and strides.
  Tensor make(Shape shape, DType dtype = DType::f32, Device device = Device::cpu(), Shape strides = {}) const {
    return Tensor(scratch->data(), dtype, device, std::move(shape), std::move(strides));
  }
};

struct Case {
  std::string name;
  std::function<void(Call&)> breaks;
  bool backward;  // the error is raised by the backward's checks
  ErrorKind kind;
  std::vector<std::string> message_parts;
};

void PrintTo(const Case& c, std::ostream* out) { *out << c.name; }

std::vector<Case> cases() {
  const ErrorKind bad = ErrorKind::invalid_argument, unsupported = ErrorKind::unsupported;
  std::vector<Case> list = {
      {"q_missing", [](Call& c) { c.t.q = Tensor(); }, false, bad, {"q is required"}},
      {"q_three_dims", [](Call& c) { c.t.q = c.make({B, Hq, Nq}); }, false, bad,
       {"q must be (B, Hq, Nq, D)", "expected 4 dims, given 3"}},
      {"lse_missing", [](Call& c) { c.t.lse = Tensor(); }, false, bad, {"lse is required"}},
      {"k_dtype", [](Call& c) { c.t.k = c.make({B, Hkv, Nk, D}, DType::bf16); }, false, bad,
       {"k must have the dtype of q", "expected fp32", "given bf16"}},
      {"batch", [](Call& c) { c.t.k = c.make({3, Hkv, Nk, D}); }, false, bad,
       {"batch size of q", "expected 2", "given 3"}},
      {"head_dim", [](Call& c) { c.t.k = c.make({B, Hkv, Nk, 16}); }, false, bad,
       {"head dim of q", "expected 8", "given 16"}},
      {"v_vs_k", [](Call& c) { c.t.v = c.make({B, Hkv, Nk + 1, D}); }, false, bad,
       {"v has the wrong shape", "expected [2, 2, 6, 8]", "given [2, 2, 7, 8]"}},
      {"o_shape", [](Call& c) { c.t.o = c.make({B, Hq, Nq - 1, D}); }, false, bad,
       {"o has the wrong shape", "expected [2, 4, 5, 8]", "given [2, 4, 4, 8]"}},
      {"lse_shape", [](Call& c) { c.t.lse = c.make({B, Hq, Nk}); }, false, bad,
       {"lse has the wrong shape", "expected [2, 4, 5]", "given [2, 4, 6]"}},
      {"lse_dtype", [](Call& c) { c.t.lse = c.make({B, Hq, Nq}, DType::bf16); }, false, bad,
       {"lse must be fp32", "bf16[2, 4, 5]"}},
      {"heads_not_multiple", [](Call& c) {
         c.t.k = c.make({B, 3, Nk, D});
         c.t.v = c.make({B, 3, Nk, D});
       }, false, bad, {"multiple of key/value heads", "Hq = 4", "Hkv = 3"}},
      {"head_dim_over_256", [](Call& c) {
         for (Tensor* x : {&c.t.q, &c.t.o}) *x = c.make({B, Hq, Nq, 264});
         for (Tensor* x : {&c.t.k, &c.t.v}) *x = c.make({B, Hkv, Nk, 264});
       }, false, unsupported, {"unsupported head dim 264", "expected at most 256"}},
      {"window_left_below_minus_one", [](Call& c) { c.options.window_left = -2; }, false, bad,
       {"window_left must be >= -1", "given -2"}},
      {"window_right_below_minus_one", [](Call& c) { c.options.window_right = -5; }, false, bad,
       {"window_right must be >= -1", "given -5"}},
      {"causal_with_window_right", [](Call& c) {
         c.options.causal = true;
         c.options.window_right = 2;
       }, false, bad, {"causal means window_right = 0", "window_right = 2"}},
      {"negative_sink_tokens", [](Call& c) { c.options.sink_tokens = -1; }, false, bad,
       {"sink_tokens must be >= 0", "given -1"}},
      {"q_last_dim_strided", [](Call& c) { c.t.q = c.make({B, Hq, Nq, D}, DType::f32, Device::cpu(), {640, 160, 32, 2}); },
       false, bad, {"q must have a contiguous last dim", "expected stride 1, given 2"}},
      {"k_on_another_device", [](Call& c) { c.t.k = c.make({B, Hkv, Nk, D}, DType::f32, Device::cuda(0)); }, false,
       bad, {"k must be on the device of q", "expected cpu", "given cuda:0"}},
      {"lse_on_another_device", [](Call& c) { c.t.lse = c.make({B, Hq, Nq}, DType::f32, Device::cuda(0)); }, false,
       bad, {"lse must be on cpu", "given cuda:0"}},
      {"sinks_shape", [](Call& c) { c.t.sinks = c.make({Hq + 1}); }, false, bad,
       {"sinks must have shape [4]", "given [5]"}},
      {"sinks_dtype", [](Call& c) { c.t.sinks = c.make({Hq}, DType::f16); }, false, bad,
       {"sinks must be fp32", "given fp16[4]"}},
      {"tile_below_16", [](Call& c) { c.options.block_q = 8; }, false, bad,
       {"tile sizes must be >= 16", "block_q = 8", "block_k = 64"}},
      {"d_o_dtype", [](Call& c) { c.g.d_o = c.make({B, Hq, Nq, D}, DType::bf16); }, true, bad,
       {"d_o must have the dtype of q", "expected fp32", "given bf16"}},
      {"dq_shape", [](Call& c) { c.g.dq = c.make({B, Hq, Nq, D + 1}); }, true, bad,
       {"dq has the wrong shape", "expected [2, 4, 5, 8]", "given [2, 4, 5, 9]"}},
      {"dk_shape", [](Call& c) { c.g.dk = c.make({B, Hq, Nk, D}); }, true, bad,
       {"dk has the wrong shape", "expected [2, 2, 6, 8]", "given [2, 4, 6, 8]"}},
      {"dv_on_another_device", [](Call& c) { c.g.dv = c.make({B, Hkv, Nk, D}, DType::f32, Device::cuda(1)); }, true,
       bad, {"dv must be on the device of q", "expected cpu", "given cuda:1"}},
      {"dv_last_dim_strided", [](Call& c) { c.g.dv = c.make({B, Hkv, Nk, D}, DType::f32, Device::cpu(), {192, 96, 16, 2}); },
       true, bad, {"dv must have a contiguous last dim", "expected stride 1, given 2"}},
      {"dsinks_missing", [](Call& c) { c.g.dsinks = Tensor(); }, true, bad, {"dsinks is required when sinks are given"}},
      {"dsinks_without_sinks", [](Call& c) { c.t.sinks = Tensor(); }, true, bad, {"dsinks was given but sinks were not"}},
      {"dsinks_shape", [](Call& c) { c.g.dsinks = c.make({2}); }, true, bad, {"dsinks must have shape [4]", "given [2]"}},
  };
  return list;
}

class Validation : public ::testing::TestWithParam<Case> {};

TEST_P(Validation, RaisesTheDocumentedError) {
  const Case& c = GetParam();
  for (AttentionImpl impl : {AttentionImpl::naive, AttentionImpl::flash}) {
    if (c.name == "tile_below_16" && impl == AttentionImpl::naive) continue;  // tiles are the tiled impl's only
    SCOPED_TRACE(name_of(impl));
    Call call;
    call.options.impl = impl;
    c.breaks(call);
    try {
      if (c.backward) attention_backward(call.t, call.g, call.options);
      else attention_forward(call.t, call.options);
      ADD_FAILURE() << "no error raised";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), c.kind) << e.what();
      for (const std::string& part : c.message_parts)
        EXPECT_NE(e.message().find(part), std::string::npos) << "'" << part << "' is not in: " << e.message();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, Validation, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

TEST(AttentionValidation, ValidCallsPass) {
  for (AttentionImpl impl : {AttentionImpl::naive, AttentionImpl::flash}) {
    Call call;
    call.options.impl = impl;
    EXPECT_NO_THROW(attention_forward(call.t, call.options));
    EXPECT_NO_THROW(attention_backward(call.t, call.g, call.options));
  }
  Call call;
  call.options.impl = AttentionImpl::naive;
  call.options.block_q = 1;  // tile sizes do not concern the naive implementation
  EXPECT_NO_THROW(attention_forward(call.t, call.options));
}

TEST(AttentionValidation, CudaTensorsInACpuOnlyBuildAreUnsupported) {
#if FT_HAS_CUDA
  GTEST_SKIP() << "this build has CUDA";
#else
  Call call;
  const Device gpu = Device::cuda(0);
  AttentionTensors t{call.make({B, Hq, Nq, D}, DType::bf16, gpu), call.make({B, Hkv, Nk, D}, DType::bf16, gpu),
                     call.make({B, Hkv, Nk, D}, DType::bf16, gpu), call.make({Hq}, DType::f32, gpu),
                     call.make({B, Hq, Nq, D}, DType::bf16, gpu), call.make({B, Hq, Nq}, DType::f32, gpu)};
  AttentionGrads g{t.o, t.o, t.k, t.v, t.sinks};
  for (bool backward : {false, true}) {
    try {
      if (backward) attention_backward(t, g, call.options);
      else attention_forward(t, call.options);
      ADD_FAILURE() << "no error raised";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::unsupported) << e.what();
      EXPECT_NE(e.message().find("cuda:0"), std::string::npos) << e.message();
      EXPECT_NE(e.message().find("has no CUDA"), std::string::npos) << e.message();
    }
  }
#endif
}

TEST(AttentionValidation, UnknownImplementationName) {
  EXPECT_EQ(parse_attention_impl("naive"), AttentionImpl::naive);
  EXPECT_EQ(parse_attention_impl("flash"), AttentionImpl::flash);
  try {
    parse_attention_impl("fast");
    FAIL() << "accepted 'fast'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
    EXPECT_NE(e.message().find("'fast'"), std::string::npos);
    EXPECT_NE(e.message().find("expected naive or flash"), std::string::npos);
  }
}

TEST(AttentionValidation, FlashKernelNames) {
  for (FlashKernels k : {FlashKernels::auto_select, FlashKernels::sm80, FlashKernels::sm90})
    EXPECT_EQ(parse_flash_kernels(name_of(k)), k);
  try {
    parse_flash_kernels("hopper");
    FAIL() << "accepted 'hopper'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
    EXPECT_NE(e.message().find("'hopper'"), std::string::npos);
    EXPECT_NE(e.message().find("expected auto, sm80 or sm90"), std::string::npos);
  }
}

TEST(AttentionValidation, HeadDimCheckNamesTheLimit) {
  EXPECT_NO_THROW(check_attention_head_dim(48, AttentionImpl::flash, Device::cpu()));  // the CPU takes any up to 256
  try {
    check_attention_head_dim(258, AttentionImpl::naive, Device::cpu());
    FAIL() << "accepted head dim 258";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unsupported);
    EXPECT_NE(e.message().find("unsupported head dim 258: expected 1 to 256"), std::string::npos) << e.message();
  }
}

// flash_kernels_for names the CUDA kernel family; CPU tensors have none, and the error says so.
TEST(AttentionValidation, FlashKernelsForNeedsCudaTensors) {
  const Call c;
  try {
    flash_kernels_for(c.t, c.options);
    FAIL() << "flash_kernels_for accepted CPU tensors";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("expected flash attention on cuda tensors"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace ft
