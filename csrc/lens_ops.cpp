// The schemas of every lens native op, in one place, and the (empty) Python module `lens._C`:
// importing it loads this library, whose static initializers register the ops with the dispatcher.
// No pybind11 and only the limited Python API, so one abi3 .so serves every Python >= 3.10.
//
// Implementations: csrc/cpu/ops_cpu.cpp (CPU key) and csrc/cuda/ops_cuda.cpp (CUDA key). The Python
// face with fake (meta) and autograd registrations is lens/ops.py.
#include <Python.h>
#include <torch/library.h>

TORCH_LIBRARY(lens, m) {
  // GRPO advantages with verl numerics: rewards [N], group_index [N] int64 -> A [N] fp32.
  m.def("grpo_advantages(Tensor rewards, Tensor group_index, float eps) -> Tensor");
  // LENS Eq. (6): weighted group advantages -> A [N] fp32.
  m.def("weighted_group_advantages(Tensor rewards, Tensor weights, Tensor group_index, float eps) -> Tensor");
  // kl / agg: indices into lens.variants.KL_KINDS / LOSS_AGGS (csrc/checks.h maps them to the enums).
  // LENS Eq. (7): (loss 0-dim fp32, stats [9] fp32: 7 metrics then the denominators D and S).
  m.def(
      "crpo_loss_fwd(Tensor logp, Tensor old_logp, Tensor? ref_logp, Tensor advantages, Tensor weights, "
      "Tensor mask, float clip_low, float clip_high, float clip_c, float beta, int kl, int agg, "
      "float? num_tokens, float? num_seqs) -> (Tensor, Tensor)");
  // d loss / d logp [N, T] in logp's dtype, given d out / d loss and the stats of the forward.
  m.def(
      "crpo_loss_bwd(Tensor grad_loss, Tensor logp, Tensor old_logp, Tensor? ref_logp, Tensor advantages, "
      "Tensor weights, Tensor mask, Tensor stats, float clip_low, float clip_high, float clip_c, float beta, "
      "int kl, int agg) -> Tensor");
}

extern "C" {
// Called by `import lens._C`; registration already happened when the library was loaded.
PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", "lens native ops (torch.ops.lens)", -1,
                                          nullptr, nullptr, nullptr, nullptr, nullptr};
  return PyModule_Create(&module_def);
}
}
