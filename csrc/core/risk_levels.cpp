// msprobe 26.x's risk levels of APIs (its api_risk_level.py, as 26.2.0 runs it): the names as
// they follow a call name's prefix ("linear" of "Functional.linear.0.forward"). Data, generated
// from the 26.2.0 wheel's sets; 26.2.0 misses a comma between "chain_matmul" and "linear", so
// neither is core there, and neither is here.
#include "core/risk_levels.h"

#include <algorithm>
#include <iterator>
#include <string_view>

namespace msprobe {
namespace {

// Sorted: looked up by binary search.
constexpr std::string_view kCore[] = {
    "__matmul__", "_all_gather_base", "_batch_norm_impl_index", "_convolution", "_fused_adam_",
    "_fused_adamw_", "_npu_dropout", "_npu_flash_attention", "_npu_flash_attention_prefix_v2",
    "_npu_flash_attention_v2", "_npu_multi_head_latent_attention_get_workspace",
    "_npu_paged_attention", "_npu_paged_attention_v2", "_npu_paged_attention_v2_get_workspace",
    "_npu_reshape_and_cache", "_npu_rotary_embedding", "_reduce_scatter_base", "addbmm", "addbmm_",
    "addmm", "addmm_", "addmv", "addmv_", "addr", "addr_", "all_gather", "all_gather_into_tensor",
    "all_reduce", "all_to_all", "all_to_all_single", "baddbmm", "baddbmm_", "batch_isend_irecv",
    "batch_norm", "batch_norm_backward_elemt", "batch_norm_backward_reduce", "batch_norm_elemt",
    "batch_norm_gather_stats", "batch_norm_gather_stats_with_counts", "batch_norm_stats",
    "batch_norm_update_stats", "bilinear", "bmm", "broadcast", "chain_matmullinear", "conv1d",
    "conv2d", "conv3d", "conv_tbc", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    "convolution", "copy_memory_", "embedding", "embedding_bag", "empty_with_format",
    "empty_with_swapped_memory", "erase_stream", "fast_gelu", "gather", "gather_pa_kv_cache",
    "get_device_limit", "get_stream_limit", "group_norm", "instance_norm", "irecv", "isend",
    "layer_norm", "linalg.matmul", "linalg.multi_dot", "linalg.vecdot", "local_response_norm",
    "matmul", "matmul_checksum", "mm", "multi_head_attention_forward", "mv", "npu_add_quant_gmm_",
    "npu_add_quant_matmul_", "npu_add_rms_norm", "npu_add_rms_norm_dynamic_mx_quant",
    "npu_add_rms_norm_dynamic_quant", "npu_add_rms_norm_quant", "npu_add_rms_norm_v2",
    "npu_advance_step_flashattn", "npu_all_gather_base_mm", "npu_all_gather_quant_mm",
    "npu_all_to_all_matmul", "npu_all_to_all_quant_matmul", "npu_alloc_float_status",
    "npu_alltoallv_gmm", "npu_alltoallv_quant_gmm", "npu_anchor_response_flags", "npu_anti_quant",
    "npu_apply_adam", "npu_apply_adam_w", "npu_apply_fused_ema_adamw", "npu_apply_rotary_pos_emb",
    "npu_attention_to_ffn", "npu_attention_update", "npu_batch_nms", "npu_bert_apply_adam",
    "npu_block_sparse_attention", "npu_bmmV2", "npu_bounding_box_decode",
    "npu_bounding_box_encode", "npu_broadcast", "npu_ciou", "npu_clear_float_status",
    "npu_clipped_swiglu", "npu_confusion_transpose", "npu_conv2d", "npu_conv3d",
    "npu_conv_transpose2d", "npu_convert_weight_to_int4pack", "npu_convolution",
    "npu_convolution_transpose", "npu_cross_entropy_loss", "npu_deformable_conv2d",
    "npu_dense_lightning_indexer_grad_kl_loss", "npu_dense_lightning_indexer_softmax_lse",
    "npu_dequant_swiglu_quant", "npu_diou", "npu_dropout_add_layer_norm",
    "npu_dropout_with_add_softmax", "npu_dtype_cast", "npu_dual_level_quant_matmul",
    "npu_dynamic_block_mx_quant", "npu_dynamic_block_quant", "npu_dynamic_dual_level_mx_quant",
    "npu_dynamic_mx_quant", "npu_dynamic_mx_quant_with_dual_axis", "npu_dynamic_quant",
    "npu_dynamic_quant_asymmetric", "npu_fast_gelu", "npu_ffn", "npu_ffn_to_attention",
    "npu_flash_attention", "npu_format_cast", "npu_format_cast_", "npu_fused_add_topk_div",
    "npu_fused_attention_score", "npu_fused_causal_conv1d", "npu_fused_floyd_attention",
    "npu_fused_infer_attention_score", "npu_fused_infer_attention_score_v2", "npu_fused_matmul",
    "npu_fusion_attention", "npu_fusion_attention_v2", "npu_fusion_attention_v3",
    "npu_gather_sparse_index", "npu_geglu", "npu_gelu", "npu_gelu_mul", "npu_gelu_quant",
    "npu_get_float_status", "npu_giou", "npu_gmm", "npu_gmm_alltoallv", "npu_gmm_v2",
    "npu_grid_assign_positive", "npu_group_norm_silu", "npu_group_norm_swish", "npu_group_quant",
    "npu_grouped_dynamic_block_quant", "npu_grouped_dynamic_mx_quant",
    "npu_grouped_mat_mul_all_reduce", "npu_grouped_matmu", "npu_grouped_matmul",
    "npu_grouped_matmul_add_", "npu_grouped_matmul_finalize_routing",
    "npu_grouped_matmul_swiglu_quant_v2", "npu_groupmatmul_add_fp32", "npu_gru", "npu_ifmr",
    "npu_incre_flash_attention", "npu_indexing", "npu_interleave_rope", "npu_iou",
    "npu_kronecker_quant", "npu_kv_quant_sparse_flash_attention", "npu_kv_rmsnorm_rope_cache",
    "npu_layer_norm_eval", "npu_lightning_indexer", "npu_linear", "npu_lstm",
    "npu_masked_fill_range", "npu_matmul_add_fp32", "npu_matmul_all_to_all", "npu_max",
    "npu_mhc_post", "npu_mhc_pre", "npu_mhc_sinkhorn", "npu_min", "npu_mish", "npu_mla_preprocess",
    "npu_mla_prolog", "npu_mla_prolog_v2", "npu_mla_prolog_v3", "npu_mm_all_reduce_add_rms_norm",
    "npu_mm_all_reduce_add_rms_norm_", "npu_mm_all_reduce_base", "npu_mm_reduce_scatter_base",
    "npu_moe_compute_expert_tokens", "npu_moe_distribute_combine",
    "npu_moe_distribute_combine_add_rms_norm", "npu_moe_distribute_combine_setup",
    "npu_moe_distribute_combine_teardown", "npu_moe_distribute_combine_v2",
    "npu_moe_distribute_dispatch", "npu_moe_distribute_dispatch_setup",
    "npu_moe_distribute_dispatch_teardown", "npu_moe_distribute_dispatch_v2",
    "npu_moe_finalize_routing", "npu_moe_finalize_routing_v2", "npu_moe_gating_top_k",
    "npu_moe_gating_top_k_softmax", "npu_moe_init_routing", "npu_moe_init_routing_v2",
    "npu_moe_re_routing", "npu_moe_token_permute", "npu_moe_token_permute_with_routing_map",
    "npu_moe_token_unpermute", "npu_moe_update_expert", "npu_mrope", "npu_multi_head_attention",
    "npu_multi_head_latent_attention", "npu_nms_rotated", "npu_nms_v4", "npu_nms_with_mask",
    "npu_normalize_batch", "npu_one_hot", "npu_pad", "npu_paged_cache_load", "npu_prefetch",
    "npu_prompt_flash_attention", "npu_ps_roi_pooling", "npu_ptiou", "npu_quant_all_reduce",
    "npu_quant_fusion_attention", "npu_quant_gmm", "npu_quant_gmm_alltoallv", "npu_quant_gmm_v2",
    "npu_quant_lightning_indexer", "npu_quant_matmul", "npu_quant_matmul_all_to_all",
    "npu_quant_matmul_gelu", "npu_quant_matmul_reduce_sum", "npu_quant_mm_reduce_scatter",
    "npu_quant_reduce_scatter", "npu_quant_scatter", "npu_quant_scatter_", "npu_quantize",
    "npu_random_choice_with_mask", "npu_recurrent_gated_delta_rule", "npu_reshape",
    "npu_ring_attention_update", "npu_ring_mla", "npu_rms_norm", "npu_rms_norm_dynamic_mx_quant",
    "npu_rms_norm_dynamic_quant", "npu_rms_norm_quant", "npu_roi_align", "npu_roi_alignbk",
    "npu_rotary_mul", "npu_rotary_position_embedding", "npu_rotated_box_decode",
    "npu_rotated_box_encode", "npu_rotated_iou", "npu_rotated_overlaps",
    "npu_scaled_masked_softmax", "npu_scatter", "npu_scatter_nd_update", "npu_scatter_nd_update_",
    "npu_scatter_pa_cache", "npu_scatter_pa_kv_cache", "npu_self_attention_prefix_encoder",
    "npu_sign_bits_pack", "npu_sign_bits_unpack", "npu_silu", "npu_sim_exponential_", "npu_slice",
    "npu_softmax_cross_entropy_with_logits", "npu_sort_v2", "npu_sparse_flash_attention",
    "npu_sparse_lightning_indexer_grad_kl_loss", "npu_stride_add", "npu_sub_sample", "npu_swiglu",
    "npu_swiglu_mx_quant", "npu_swiglu_quant", "npu_top_k_top_p", "npu_top_k_top_p_sample",
    "npu_trans_quant_param", "npu_transpose", "npu_transpose_batchmatmul",
    "npu_transpose_quant_batchmatmul", "npu_weight_quant_batchmatmul", "npu_yolo_boxes_encode",
    "one_", "recv", "reduce", "reduce_scatter", "reduce_scatter_tensor", "reset_stream_limit",
    "save_npugraph_tensor", "scaled_dot_product_attention", "scatter", "scatter_update",
    "scatter_update_", "send", "set_device_limit", "set_stream_limit",
};

constexpr std::string_view kLow[] = {
    "__bool__", "align_as", "align_to", "arange", "atleast_1d", "atleast_2d", "atleast_3d",
    "bfloat16", "bool", "byte", "cat", "cfloat", "char", "chunk", "clamp", "clone", "column_stack",
    "concat", "concatenate", "diag", "diag_embed", "diagflat", "double", "dsplit", "dstack",
    "empty", "empty_like", "expand", "expand_as", "eye", "flatten", "float", "full", "full_like",
    "half", "hsplit", "hstack", "identity", "int", "linspace", "logspace", "long", "moveaxis",
    "movedim", "numpy", "ones", "ones_like", "permute", "ravel", "repeat", "repeat_interleave",
    "reshape", "reshape_as", "row_stack", "split", "split_with_sizes", "squeeze", "stack",
    "stride", "swapaxes", "swapdims", "tensor_split", "tile", "to", "transpose", "tril",
    "tril_indices", "triu", "triu_indices", "type_as", "unbind", "unflatten", "unfold",
    "unsafe_chunk", "unsafe_split", "unsafe_split_with_sizes", "unsqueeze", "view", "view_as",
    "vsplit", "vstack", "zeros", "zeros_like",
};

template <size_t N>
bool contains(const std::string_view (&names)[N], std::string_view name) {
  return std::binary_search(std::begin(names), std::end(names), name);
}

// "Functional.linear.0.forward" -> "linear"; "Tensor.__mul__.3.backward" -> "__mul__". A dotted
// API ("Torch.linalg.norm") is recorded under its last part already.
std::string_view api_of(std::string_view call) {
  for (std::string_view direction : {std::string_view(".forward"), std::string_view(".backward")}) {
    if (call.size() > direction.size() &&
        call.substr(call.size() - direction.size()) == direction) {
      call.remove_suffix(direction.size());
      const size_t dot = call.rfind('.');
      if (dot != std::string_view::npos) call = call.substr(0, dot);  // the counter
      break;
    }
  }
  const size_t first = call.find('.');
  return first == std::string_view::npos ? call : call.substr(first + 1);
}

}  // namespace

ApiRisk api_risk(std::string_view call_name) {
  const std::string_view api = api_of(call_name);
  if (contains(kCore, api)) return ApiRisk::Core;
  if (contains(kLow, api)) return ApiRisk::Low;
  return ApiRisk::Focus;
}

RiskLevel effective_risk_level(const Config& c) {
  const bool dump_task =
      c.task == Task::Statistics || c.task == Task::Tensor || c.task == Task::Structure;
  const bool api_level = c.level == Level::L1 || c.level == Level::Mix;
  return c.generation == Generation::V26 && dump_task && api_level ? c.msprobe26.risk_level
                                                                   : RiskLevel::All;
}

bool kept_at_risk_level(std::string_view call_name, RiskLevel level) {
  if (level == RiskLevel::All || call_name.rfind("Module.", 0) == 0) return true;
  const ApiRisk risk = api_risk(call_name);
  return level == RiskLevel::Core ? risk == ApiRisk::Core : risk != ApiRisk::Low;
}

}  // namespace msprobe
