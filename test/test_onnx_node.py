"""The ONNX backend node tests (onnx.backend.test, ~1,900 cases) through fusegrad's OnnxRunner, on the PYTHON
interpreter (small inputs; no compiler in the loop keeps the whole suite at a few minutes on 2 cores).

Every case runs. The ones fusegrad fails are in EXPECTED_FAILURES with a reason: they are marked xfail(strict), so a
case that starts to pass fails the run until it is taken off the list. `python test/test_onnx_node.py` prints the
pass count (onnx 1.23.2: 1,630 of 1,884)."""
import sys, os
import pytest
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytest.importorskip("onnx")
import onnx
import onnx.backend.base
import onnx.backend.test.loader
from onnx.backend.test.runner import Runner
from fusegrad import dtypes
from fusegrad.nn.onnx import OnnxRunner, Seq

DEVICE = "PYTHON"

def _to_numpy(v):
  if isinstance(v, Seq) or isinstance(v, list): return [_to_numpy(x) for x in v]
  if v is None: return None
  if v.dtype == dtypes.bfloat16:
    import ml_dtypes
    return v.bitcast(dtypes.uint16).numpy().view(ml_dtypes.bfloat16)
  return v.numpy()

class FusegradRep(onnx.backend.base.BackendRep):
  def __init__(self, runner: OnnxRunner): self.runner = runner
  def run(self, inputs, **kwargs):
    names = list(self.runner.inputs)
    feeds = dict(zip(names, inputs)) if isinstance(inputs, (list, tuple)) else dict(inputs)
    return [_to_numpy(v) for v in self.runner(feeds).values()]

class FusegradBackend(onnx.backend.base.Backend):
  """onnx.backend.base.Backend for fusegrad: prepare(model) -> a rep whose run(inputs) returns NumPy outputs."""
  @classmethod
  def prepare(cls, model, device: str = "CPU", **kwargs):
    return FusegradRep(OnnxRunner(model, device=DEVICE))
  @classmethod
  def run_model(cls, model, inputs, device: str = "CPU", **kwargs):
    return cls.prepare(model, device).run(inputs)
  @classmethod
  def supports_device(cls, device: str) -> bool: return device == "CPU"

_LOWBITS = "float8 / float4 / int4 / int2 / e8m0 element types: fusegrad has no such dtypes"
_STRINGS = "string tensors: fusegrad has no string dtype"
_FP16 = "float16 rounding: results 1 ulp off the reference at rtol 1e-3"
_RANDOM = "random outputs (training-mode dropout, Bernoulli, RandomUniformLike) can't match the reference's generator"
_IDFT = "inverse DFT: fusegrad gives ~1e-15 where the reference has 2e-7 of float32 noise (atol 1e-7)"
_ANTIALIAS = "Resize with antialias is not implemented"

# case name (exact) -> why fusegrad fails it
EXPECTED_FAILURES: dict[str, str] = {
  "test_ai_onnx_ml_label_encoder_string_int": _STRINGS,
  "test_ai_onnx_ml_label_encoder_string_int_no_default": _STRINGS,
  "test_ai_onnx_ml_label_encoder_tensor_mapping": _STRINGS,
  "test_ai_onnx_ml_label_encoder_tensor_value_only_mapping": _STRINGS,
  "test_ai_onnx_ml_tree_ensemble_set_membership": "op ml.TreeEnsemble is not implemented",
  "test_ai_onnx_ml_tree_ensemble_single_tree": "op ml.TreeEnsemble is not implemented",
  "test_basic_deform_conv_with_padding": "op DeformConv is not implemented",
  "test_basic_deform_conv_without_padding": "op DeformConv is not implemented",
  "test_bernoulli": _RANDOM,
  "test_bernoulli_double": _RANDOM,
  "test_bernoulli_double_expanded": _RANDOM,
  "test_bernoulli_expanded": _RANDOM,
  "test_bernoulli_seed": _RANDOM,
  "test_bernoulli_seed_expanded": _RANDOM,
  "test_cast_FLOAT16_to_FLOAT4E2M1": _LOWBITS,
  "test_cast_FLOAT16_to_FLOAT8E4M3FN": _LOWBITS,
  "test_cast_FLOAT16_to_FLOAT8E4M3FNUZ": _LOWBITS,
  "test_cast_FLOAT16_to_FLOAT8E5M2": _LOWBITS,
  "test_cast_FLOAT16_to_FLOAT8E5M2FNUZ": _LOWBITS,
  "test_cast_FLOAT16_to_INT2": _LOWBITS,
  "test_cast_FLOAT16_to_INT4": _LOWBITS,
  "test_cast_FLOAT16_to_UINT2": _LOWBITS,
  "test_cast_FLOAT16_to_UINT4": _LOWBITS,
  "test_cast_FLOAT4E2M1_to_FLOAT": _LOWBITS,
  "test_cast_FLOAT4E2M1_to_FLOAT16": _LOWBITS,
  "test_cast_FLOAT8E4M3FNUZ_to_FLOAT": _LOWBITS,
  "test_cast_FLOAT8E4M3FNUZ_to_FLOAT16": _LOWBITS,
  "test_cast_FLOAT8E4M3FN_to_FLOAT": _LOWBITS,
  "test_cast_FLOAT8E4M3FN_to_FLOAT16": _LOWBITS,
  "test_cast_FLOAT8E5M2FNUZ_to_FLOAT": _LOWBITS,
  "test_cast_FLOAT8E5M2FNUZ_to_FLOAT16": _LOWBITS,
  "test_cast_FLOAT8E5M2_to_FLOAT": _LOWBITS,
  "test_cast_FLOAT8E5M2_to_FLOAT16": _LOWBITS,
  "test_cast_FLOAT_to_FLOAT4E2M1": _LOWBITS,
  "test_cast_FLOAT_to_FLOAT8E4M3FN": _LOWBITS,
  "test_cast_FLOAT_to_FLOAT8E4M3FNUZ": _LOWBITS,
  "test_cast_FLOAT_to_FLOAT8E5M2": _LOWBITS,
  "test_cast_FLOAT_to_FLOAT8E5M2FNUZ": _LOWBITS,
  "test_cast_FLOAT_to_INT2": _LOWBITS,
  "test_cast_FLOAT_to_INT4": _LOWBITS,
  "test_cast_FLOAT_to_UINT2": _LOWBITS,
  "test_cast_FLOAT_to_UINT4": _LOWBITS,
  "test_cast_INT2_to_FLOAT": _LOWBITS,
  "test_cast_INT2_to_FLOAT16": _LOWBITS,
  "test_cast_INT2_to_INT8": _LOWBITS,
  "test_cast_INT4_to_FLOAT": _LOWBITS,
  "test_cast_INT4_to_FLOAT16": _LOWBITS,
  "test_cast_INT4_to_INT8": _LOWBITS,
  "test_cast_UINT2_to_FLOAT": _LOWBITS,
  "test_cast_UINT2_to_FLOAT16": _LOWBITS,
  "test_cast_UINT2_to_UINT8": _LOWBITS,
  "test_cast_UINT4_to_FLOAT": _LOWBITS,
  "test_cast_UINT4_to_FLOAT16": _LOWBITS,
  "test_cast_UINT4_to_UINT8": _LOWBITS,
  "test_cast_e8m0_FLOAT16_to_FLOAT8E8M0": _LOWBITS,
  "test_cast_e8m0_FLOAT8E8M0_to_FLOAT": _LOWBITS,
  "test_cast_e8m0_FLOAT8E8M0_to_FLOAT16": _LOWBITS,
  "test_cast_e8m0_FLOAT_to_FLOAT8E8M0": _LOWBITS,
  "test_cast_no_saturate_FLOAT16_to_FLOAT8E4M3FN": _LOWBITS,
  "test_cast_no_saturate_FLOAT16_to_FLOAT8E4M3FNUZ": _LOWBITS,
  "test_cast_no_saturate_FLOAT16_to_FLOAT8E5M2": _LOWBITS,
  "test_cast_no_saturate_FLOAT16_to_FLOAT8E5M2FNUZ": _LOWBITS,
  "test_cast_no_saturate_FLOAT_to_FLOAT8E4M3FN": _LOWBITS,
  "test_cast_no_saturate_FLOAT_to_FLOAT8E4M3FNUZ": _LOWBITS,
  "test_cast_no_saturate_FLOAT_to_FLOAT8E5M2": _LOWBITS,
  "test_cast_no_saturate_FLOAT_to_FLOAT8E5M2FNUZ": _LOWBITS,
  "test_castlike_FLOAT16_to_FLOAT4E2M1": _LOWBITS,
  "test_castlike_FLOAT16_to_FLOAT4E2M1_expanded": _LOWBITS,
  "test_castlike_FLOAT16_to_FLOAT8E4M3FN": _LOWBITS,
  "test_castlike_FLOAT16_to_FLOAT8E4M3FNUZ": _LOWBITS,
  "test_castlike_FLOAT16_to_FLOAT8E4M3FNUZ_expanded": _LOWBITS,
  "test_castlike_FLOAT16_to_FLOAT8E4M3FN_expanded": _LOWBITS,
  "test_castlike_FLOAT16_to_FLOAT8E5M2": _LOWBITS,
  "test_castlike_FLOAT16_to_FLOAT8E5M2FNUZ": _LOWBITS,
  "test_castlike_FLOAT16_to_FLOAT8E5M2FNUZ_expanded": _LOWBITS,
  "test_castlike_FLOAT16_to_FLOAT8E5M2_expanded": _LOWBITS,
  "test_castlike_FLOAT16_to_INT2": _LOWBITS,
  "test_castlike_FLOAT16_to_INT2_expanded": _LOWBITS,
  "test_castlike_FLOAT16_to_INT4": _LOWBITS,
  "test_castlike_FLOAT16_to_INT4_expanded": _LOWBITS,
  "test_castlike_FLOAT16_to_UINT2": _LOWBITS,
  "test_castlike_FLOAT16_to_UINT2_expanded": _LOWBITS,
  "test_castlike_FLOAT16_to_UINT4": _LOWBITS,
  "test_castlike_FLOAT16_to_UINT4_expanded": _LOWBITS,
  "test_castlike_FLOAT4E2M1_to_FLOAT": _LOWBITS,
  "test_castlike_FLOAT4E2M1_to_FLOAT16": _LOWBITS,
  "test_castlike_FLOAT4E2M1_to_FLOAT16_expanded": _LOWBITS,
  "test_castlike_FLOAT4E2M1_to_FLOAT_expanded": _LOWBITS,
  "test_castlike_FLOAT8E4M3FNUZ_to_FLOAT": _LOWBITS,
  "test_castlike_FLOAT8E4M3FNUZ_to_FLOAT16": _LOWBITS,
  "test_castlike_FLOAT8E4M3FNUZ_to_FLOAT16_expanded": _LOWBITS,
  "test_castlike_FLOAT8E4M3FNUZ_to_FLOAT_expanded": _LOWBITS,
  "test_castlike_FLOAT8E4M3FN_to_FLOAT": _LOWBITS,
  "test_castlike_FLOAT8E4M3FN_to_FLOAT16": _LOWBITS,
  "test_castlike_FLOAT8E4M3FN_to_FLOAT16_expanded": _LOWBITS,
  "test_castlike_FLOAT8E4M3FN_to_FLOAT_expanded": _LOWBITS,
  "test_castlike_FLOAT8E5M2FNUZ_to_FLOAT": _LOWBITS,
  "test_castlike_FLOAT8E5M2FNUZ_to_FLOAT16": _LOWBITS,
  "test_castlike_FLOAT8E5M2FNUZ_to_FLOAT16_expanded": _LOWBITS,
  "test_castlike_FLOAT8E5M2FNUZ_to_FLOAT_expanded": _LOWBITS,
  "test_castlike_FLOAT8E5M2_to_FLOAT": _LOWBITS,
  "test_castlike_FLOAT8E5M2_to_FLOAT16": _LOWBITS,
  "test_castlike_FLOAT8E5M2_to_FLOAT16_expanded": _LOWBITS,
  "test_castlike_FLOAT8E5M2_to_FLOAT_expanded": _LOWBITS,
  "test_castlike_FLOAT_to_FLOAT4E2M1": _LOWBITS,
  "test_castlike_FLOAT_to_FLOAT4E2M1_expanded": _LOWBITS,
  "test_castlike_FLOAT_to_FLOAT8E4M3FN": _LOWBITS,
  "test_castlike_FLOAT_to_FLOAT8E4M3FNUZ": _LOWBITS,
  "test_castlike_FLOAT_to_FLOAT8E4M3FNUZ_expanded": _LOWBITS,
  "test_castlike_FLOAT_to_FLOAT8E4M3FN_expanded": _LOWBITS,
  "test_castlike_FLOAT_to_FLOAT8E5M2": _LOWBITS,
  "test_castlike_FLOAT_to_FLOAT8E5M2FNUZ": _LOWBITS,
  "test_castlike_FLOAT_to_FLOAT8E5M2FNUZ_expanded": _LOWBITS,
  "test_castlike_FLOAT_to_FLOAT8E5M2_expanded": _LOWBITS,
  "test_castlike_FLOAT_to_INT2": _LOWBITS,
  "test_castlike_FLOAT_to_INT2_expanded": _LOWBITS,
  "test_castlike_FLOAT_to_INT4": _LOWBITS,
  "test_castlike_FLOAT_to_INT4_expanded": _LOWBITS,
  "test_castlike_FLOAT_to_UINT2": _LOWBITS,
  "test_castlike_FLOAT_to_UINT2_expanded": _LOWBITS,
  "test_castlike_FLOAT_to_UINT4": _LOWBITS,
  "test_castlike_FLOAT_to_UINT4_expanded": _LOWBITS,
  "test_castlike_INT2_to_FLOAT": _LOWBITS,
  "test_castlike_INT2_to_FLOAT16": _LOWBITS,
  "test_castlike_INT2_to_FLOAT16_expanded": _LOWBITS,
  "test_castlike_INT2_to_FLOAT_expanded": _LOWBITS,
  "test_castlike_INT2_to_INT8": _LOWBITS,
  "test_castlike_INT2_to_INT8_expanded": _LOWBITS,
  "test_castlike_INT4_to_FLOAT": _LOWBITS,
  "test_castlike_INT4_to_FLOAT16": _LOWBITS,
  "test_castlike_INT4_to_FLOAT16_expanded": _LOWBITS,
  "test_castlike_INT4_to_FLOAT_expanded": _LOWBITS,
  "test_castlike_INT4_to_INT8": _LOWBITS,
  "test_castlike_INT4_to_INT8_expanded": _LOWBITS,
  "test_castlike_UINT2_to_FLOAT": _LOWBITS,
  "test_castlike_UINT2_to_FLOAT16": _LOWBITS,
  "test_castlike_UINT2_to_FLOAT16_expanded": _LOWBITS,
  "test_castlike_UINT2_to_FLOAT_expanded": _LOWBITS,
  "test_castlike_UINT2_to_UINT8": _LOWBITS,
  "test_castlike_UINT2_to_UINT8_expanded": _LOWBITS,
  "test_castlike_UINT4_to_FLOAT": _LOWBITS,
  "test_castlike_UINT4_to_FLOAT16": _LOWBITS,
  "test_castlike_UINT4_to_FLOAT16_expanded": _LOWBITS,
  "test_castlike_UINT4_to_FLOAT_expanded": _LOWBITS,
  "test_castlike_UINT4_to_UINT8": _LOWBITS,
  "test_castlike_UINT4_to_UINT8_expanded": _LOWBITS,
  "test_castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FN": _LOWBITS,
  "test_castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FNUZ": _LOWBITS,
  "test_castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FNUZ_expanded": _LOWBITS,
  "test_castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FN_expanded": _LOWBITS,
  "test_castlike_no_saturate_FLOAT16_to_FLOAT8E5M2": _LOWBITS,
  "test_castlike_no_saturate_FLOAT16_to_FLOAT8E5M2FNUZ": _LOWBITS,
  "test_castlike_no_saturate_FLOAT16_to_FLOAT8E5M2FNUZ_expanded": _LOWBITS,
  "test_castlike_no_saturate_FLOAT16_to_FLOAT8E5M2_expanded": _LOWBITS,
  "test_castlike_no_saturate_FLOAT_to_FLOAT8E4M3FN": _LOWBITS,
  "test_castlike_no_saturate_FLOAT_to_FLOAT8E4M3FNUZ": _LOWBITS,
  "test_castlike_no_saturate_FLOAT_to_FLOAT8E4M3FNUZ_expanded": _LOWBITS,
  "test_castlike_no_saturate_FLOAT_to_FLOAT8E4M3FN_expanded": _LOWBITS,
  "test_castlike_no_saturate_FLOAT_to_FLOAT8E5M2": _LOWBITS,
  "test_castlike_no_saturate_FLOAT_to_FLOAT8E5M2FNUZ": _LOWBITS,
  "test_castlike_no_saturate_FLOAT_to_FLOAT8E5M2FNUZ_expanded": _LOWBITS,
  "test_castlike_no_saturate_FLOAT_to_FLOAT8E5M2_expanded": _LOWBITS,
  "test_causal_conv_with_state_silu_fp16": _FP16,
  "test_causal_conv_with_state_silu_fp16_expanded": _FP16,
  "test_deform_conv_with_mask_bias": "op DeformConv is not implemented",
  "test_deform_conv_with_multiple_offset_groups": "op DeformConv is not implemented",
  "test_dequantizelinear_blocked": "DequantizeLinear with block_size is not implemented",
  "test_dequantizelinear_e4m3fn": _LOWBITS,
  "test_dequantizelinear_e4m3fn_float16": _LOWBITS,
  "test_dequantizelinear_e4m3fn_zero_point": _LOWBITS,
  "test_dequantizelinear_e5m2": _LOWBITS,
  "test_dequantizelinear_float4e2m1": _LOWBITS,
  "test_dequantizelinear_int2": _LOWBITS,
  "test_dequantizelinear_int4": _LOWBITS,
  "test_dequantizelinear_uint2": _LOWBITS,
  "test_dequantizelinear_uint4": _LOWBITS,
  "test_det_2d": "op Det is not implemented",
  "test_det_nd": "op Det is not implemented",
  "test_dft_inverse": _IDFT,
  "test_dft_inverse_opset19": _IDFT,
  "test_dft_irfft": "DFT inverse with onesided (irfft) is not implemented",
  "test_dft_irfft_opset19": "DFT inverse with onesided (irfft) is not implemented",
  "test_equal_string": _STRINGS,
  "test_equal_string_broadcast": _STRINGS,
  "test_image_decoder_decode_bmp_rgb": "op ImageDecoder is not implemented",
  "test_image_decoder_decode_jpeg2k_rgb": "op ImageDecoder is not implemented",
  "test_image_decoder_decode_jpeg_bgr": "op ImageDecoder is not implemented",
  "test_image_decoder_decode_jpeg_grayscale": "op ImageDecoder is not implemented",
  "test_image_decoder_decode_jpeg_rgb": "op ImageDecoder is not implemented",
  "test_image_decoder_decode_png_rgb": "op ImageDecoder is not implemented",
  "test_image_decoder_decode_pnm_rgb": "op ImageDecoder is not implemented",
  "test_image_decoder_decode_tiff_rgb": "op ImageDecoder is not implemented",
  "test_image_decoder_decode_webp_rgb": "op ImageDecoder is not implemented",
  "test_loop16_seq_none": "Loop carrying an optional sequence: the output is not a sequence",
  "test_maxunpool_export_with_output_shape": "MaxUnpool with an output_shape larger than the default",
  "test_melweightmatrix": "op MelWeightMatrix is not implemented",
  "test_quantizelinear_blocked_asymmetric": "QuantizeLinear with block_size is not implemented",
  "test_quantizelinear_blocked_symmetric": "QuantizeLinear with block_size is not implemented",
  "test_quantizelinear_e4m3fn": _LOWBITS,
  "test_quantizelinear_e5m2": _LOWBITS,
  "test_quantizelinear_float4e2m1": _LOWBITS,
  "test_quantizelinear_int2": _LOWBITS,
  "test_quantizelinear_int4": _LOWBITS,
  "test_quantizelinear_uint2": _LOWBITS,
  "test_quantizelinear_uint4": _LOWBITS,
  "test_regex_full_match_basic": _STRINGS,
  "test_regex_full_match_email_domain": _STRINGS,
  "test_regex_full_match_empty": _STRINGS,
  "test_resize_downsample_scales_cubic_antialias": _ANTIALIAS,
  "test_resize_downsample_scales_linear_antialias": _ANTIALIAS,
  "test_resize_downsample_sizes_cubic_antialias": _ANTIALIAS,
  "test_resize_downsample_sizes_linear_antialias": _ANTIALIAS,
  "test_roialign_aligned_false": "op RoiAlign is not implemented",
  "test_roialign_aligned_true": "op RoiAlign is not implemented",
  "test_roialign_mode_max": "op RoiAlign is not implemented",
  "test_scan_sum": "Scan of opset 8 (batch axis, sequence_lens) is not implemented",
  "test_string_concat": _STRINGS,
  "test_string_concat_broadcasting": _STRINGS,
  "test_string_concat_empty_string": _STRINGS,
  "test_string_concat_utf8": _STRINGS,
  "test_string_concat_zero_dimensional": _STRINGS,
  "test_string_split_basic": _STRINGS,
  "test_string_split_consecutive_delimiters": _STRINGS,
  "test_string_split_empty_string_delimiter": _STRINGS,
  "test_string_split_empty_tensor": _STRINGS,
  "test_string_split_maxsplit": _STRINGS,
  "test_string_split_no_delimiter": _STRINGS,
  "test_strnormalizer_export_monday_casesensintive_lower": _STRINGS,
  "test_strnormalizer_export_monday_casesensintive_nochangecase": _STRINGS,
  "test_strnormalizer_export_monday_casesensintive_upper": _STRINGS,
  "test_strnormalizer_export_monday_empty_output": _STRINGS,
  "test_strnormalizer_export_monday_insensintive_upper_twodim": _STRINGS,
  "test_strnormalizer_nostopwords_nochangecase": _STRINGS,
  "test_tfidfvectorizer_tf_batch_onlybigrams_skip0": "op TfIdfVectorizer is not implemented",
  "test_tfidfvectorizer_tf_batch_onlybigrams_skip5": "op TfIdfVectorizer is not implemented",
  "test_tfidfvectorizer_tf_batch_uniandbigrams_skip5": "op TfIdfVectorizer is not implemented",
  "test_tfidfvectorizer_tf_only_bigrams_skip0": "op TfIdfVectorizer is not implemented",
  "test_tfidfvectorizer_tf_onlybigrams_levelempty": "op TfIdfVectorizer is not implemented",
  "test_tfidfvectorizer_tf_onlybigrams_skip5": "op TfIdfVectorizer is not implemented",
  "test_tfidfvectorizer_tf_uniandbigrams_skip5": "op TfIdfVectorizer is not implemented",
  "test_training_dropout": _RANDOM,
  "test_training_dropout_default": _RANDOM,
  "test_training_dropout_default_mask": _RANDOM,
  "test_training_dropout_mask": _RANDOM,
  "test_unique_bfloat16_sorted_without_axis": _FP16,
}

def _normalize(t):
  return onnx.numpy_helper.to_array(t) if isinstance(t, onnx.TensorProto) else t

def run_case(case) -> None:
  rep = FusegradBackend.prepare(case.model, "CPU")
  for inputs, ref_outputs in case.data_sets:
    outs = rep.run([_normalize(i) for i in inputs])
    Runner.assert_similar_outputs([_normalize(o) for o in ref_outputs], outs, rtol=case.rtol, atol=case.atol)

def _cases():
  import warnings
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    return sorted(onnx.backend.test.loader.load_model_tests(kind="node"), key=lambda c: c.name)

def expected_failure(name: str) -> str | None:
  return EXPECTED_FAILURES.get(name)

CASES = _cases()

@pytest.mark.parametrize("case", [pytest.param(c, id=c.name, marks=pytest.mark.xfail(reason=why, strict=True))
                                  if (why := expected_failure(c.name)) else pytest.param(c, id=c.name) for c in CASES])
def test_node(case):
  run_case(case)

if __name__ == "__main__":
  failing = sum(expected_failure(c.name) is not None for c in CASES)
  print(f"{len(CASES) - failing}/{len(CASES)} node cases expected to pass ({failing} in EXPECTED_FAILURES)")
