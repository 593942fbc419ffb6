// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Fine-tuning a BERT classifier end to end: data -> batches (background collation) -> forward/backward with
// gradient accumulation -> clipped AdamW with a warmup schedule (and loss scaling for fp16) -> periodic evaluation,
// JSONL metrics, early stopping, atomic checkpoints with everything --resume needs to continue bit-exactly.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <optional>
#include <type_traits>

#include "../io/detail/json.hpp"
#include "../io/tokenizer_options.hpp"
#include "../models/bert/model.hpp"
#include "../models/bert/weights.hpp"
#include "../models/bert/lora.hpp"
#include "../optim/adamw.hpp"
#include "../optim/clip.hpp"
#include "../optim/schedule.hpp"
#include "../parallel/agreement.hpp"
#include "../parallel/data_parallel.hpp"
#include "../precision/loss_scaler.hpp"
#include "checkpoint.hpp"
#include "finite_watch.hpp"
#include "loader.hpp"
#include "metrics.hpp"
#include "optimizer_state.hpp"
#include "options.hpp"
#include "output_folder.hpp"
#include "preemption.hpp"
#include "progress.hpp"
#include "resume_state.hpp"
#include "sampler.hpp"

namespace loom::train {

namespace fs = std::filesystem;

/// The data and the model description a run starts from (everything checked before any training starts).
struct prepared_run {
  io::bert_config config;
  fs::path weights;  ///< empty: train from scratch
  fs::path vocab;
  io::bert_tokenizer_config tokenizer_config;
  std::vector<std::string> labels;
  dataset train, dev;
  /// The checkpoint --resume names (resolved: `resume->dir`), checked against this run's data and flags.
  std::optional<resume_state> resume;
  output_lock lock;                    ///< held on --output for the whole run (by rank 0 only)
  bool finished = false;               ///< --resume named a run that had already reached its last step
};

/// What a finished run reached, for `--resume` of a run that has nothing left to do: its last evaluation (from its
/// metrics.jsonl) and its best metric.
inline std::string finished_run_summary(const resume_state& st, const train_options& o) {
  std::string eval;
  std::ifstream in(st.dir.parent_path() / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto r = io::detail::parse_json_strict(line);
    if (r.kind == io::detail::json_parse_result::failure::none && r.value.is_object() &&
        r.value.value("type", "") == "eval")
      eval = line;
  }
  std::string out = "--resume " + st.dir.string() + ": that run already finished (it reached its last step, " +
                    std::to_string(st.step) + "); nothing to train";
  if (!eval.empty()) {
    const auto j = io::detail::parse_json_strict(eval).value;
    char buf[256];
    std::snprintf(buf, sizeof buf, "; its last evaluation (step %lld): accuracy %.4f, macro-F1 %.4f, loss %.4f",
                  static_cast<long long>(j.value("step", std::int64_t{0})), j.value("accuracy", 0.0),
                  j.value("macro_f1", 0.0), j.value("loss", 0.0));
    out += buf;
  }
  if (st.best_metric) out += "; best " + o.metric + " " + std::to_string(*st.best_metric);
  return out + "; the model is in " + st.dir.parent_path().string();
}

/// How long a run is: batches per epoch, optimizer steps per epoch (the last may hold fewer micro-batches) and in all.
struct run_length {
  std::size_t batches_per_epoch = 0;
  std::int64_t steps_per_epoch = 0, total_steps = 0;
};
inline run_length length_of(const train_options& o, std::size_t train_rows) {
  run_length l;
  const std::size_t rows = o.global_micro_batch();
  l.batches_per_epoch = (train_rows + rows - 1) / rows;
  l.steps_per_epoch = static_cast<std::int64_t>((l.batches_per_epoch + o.grad_accum - 1) / o.grad_accum);
  l.total_steps = o.max_steps > 0 ? o.max_steps : l.steps_per_epoch * o.epochs;
  return l;
}

/// Whether `a` and `b` name the same folder (after resolving links and dots; false when either is absent).
inline bool same_folder(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  return fs::equivalent(a, b, ec) && !ec;
}

/// Whether `path` is `root` or lies inside it (after resolving links and dots).
inline bool within(const fs::path& path, const fs::path& root) {
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(path, ec), r = fs::weakly_canonical(root, ec);
  auto [end_r, end_p] = std::mismatch(r.begin(), r.end(), p.begin(), p.end());
  return end_r == r.end();
}

/// Reads and checks everything: flags, model folder or config, tokenizer, train/dev files, labels. `owns_output`:
/// this process creates, locks and clears --output (rank 0 of a data-parallel run; the other ranks only read).
inline prepared_run prepare(const train_options& o, bool owns_output = true) {
  prepared_run r;
  LOOM_CHECK(o.model_dir.empty() != o.config_file.empty(), "give exactly one of --model DIR or --config FILE");
  LOOM_CHECK(!o.train.empty(), "--train FILE is required");
  LOOM_CHECK(o.epochs >= 1 || o.max_steps > 0, "--epochs must be at least 1");
  LOOM_CHECK(o.batch >= 1 && o.grad_accum >= 1, "--batch-size and --grad-accum must be positive");
  LOOM_CHECK(o.lr > 0 && std::isfinite(o.lr), "--lr must be positive");
  LOOM_CHECK(o.warmup_ratio >= 0 && o.warmup_ratio < 1, "--warmup-ratio must be in [0, 1)");
  LOOM_CHECK(o.weight_decay >= 0, "--weight-decay must not be negative");
  LOOM_CHECK(o.schedule == "linear" || o.schedule == "cosine" || o.schedule == "constant",
             "--schedule must be constant, linear or cosine");
  LOOM_CHECK(o.metric == "accuracy" || o.metric == "macro_f1" || o.metric == "loss",
             "--metric must be accuracy, macro_f1 or loss");
  LOOM_CHECK(!o.output.empty(), "--output DIR is required");
  if (!o.model_dir.empty()) {
    const fs::path d = o.model_dir;
    LOOM_CHECK(fs::is_directory(d), "--model " + o.model_dir + ": not a folder");
    for (const char* f : {"config.json", "model.safetensors", "vocab.txt"})
      LOOM_CHECK(fs::exists(d / f), "--model " + o.model_dir + ": " + f + " is missing");
    r.config = io::bert_config::load(d / "config.json");
    r.weights = d / "model.safetensors";
    r.vocab = d / "vocab.txt";
    if (fs::exists(d / "tokenizer_config.json"))
      r.tokenizer_config = io::bert_tokenizer_config::load(d / "tokenizer_config.json");
  } else {
    LOOM_CHECK(!o.vocab.empty(), "--config needs --vocab FILE (the WordPiece vocabulary)");
    LOOM_CHECK(fs::exists(o.vocab), "--vocab " + o.vocab + ": file not found");
    r.config = io::bert_config::load(o.config_file);
    r.vocab = o.vocab;
    r.tokenizer_config.do_lower_case = o.lower;
  }
  LOOM_CHECK(static_cast<std::int64_t>(o.max_seq_len) <= r.config.max_position_embeddings,
             "--max-seq-len " + std::to_string(o.max_seq_len) + " exceeds the model's max_position_embeddings " +
                 std::to_string(r.config.max_position_embeddings));
  LOOM_CHECK(o.max_seq_len >= 3, "--max-seq-len must be at least 3");
  const auto tok = io::wordpiece_tokenizer::from_file(
      r.vocab, io::tokenizer_options(r.tokenizer_config, (r.vocab.parent_path() / "tokenizer_config.json").string()));
  LOOM_CHECK(static_cast<std::int64_t>(tok.get_vocab().size()) <= r.config.vocab_size,
             r.vocab.string() + " has " + std::to_string(tok.get_vocab().size()) +
                 " tokens but config.json's vocab_size is " + std::to_string(r.config.vocab_size));
  const auto fmt = [&](const std::string& path) { return io::table_format_for(o.format, path); };
  labelled_rows train_rows = read_labelled(o.train, fmt(o.train), o.cols);
  labelled_rows dev_rows;
  if (!o.dev.empty()) {
    dev_rows = read_labelled(o.dev, fmt(o.dev), o.cols);
  } else {
    auto [t, d] = split(train_rows, o.dev_split, o.seed);
    train_rows = std::move(t);
    dev_rows = std::move(d);
  }
  r.labels = label_set(train_rows.labels);
  LOOM_CHECK(r.labels.size() >= 2, o.train + ": the label column has a single value ('" + r.labels[0] +
                                       "'): classification needs at least two classes");
  std::map<std::string, std::int64_t> ids;
  for (std::size_t i = 0; i < r.labels.size(); ++i) ids[r.labels[i]] = static_cast<std::int64_t>(i);
  r.train = tokenize(train_rows, tok, o.max_seq_len, ids);
  r.dev = tokenize(dev_rows, tok, o.max_seq_len, ids);
  r.config.set_labels(r.labels);
  if (!o.resume.empty()) {
    // The checkpoint must exist, be intact and belong to this very run (data, order, schedule, model) before any
    // model is built: a resumed run that silently skipped or repeated rows would look like a success.
    r.resume = read_resume_state(resolve_checkpoint(o.resume));
    const std::string what = "--resume " + r.resume->dir.string();
    LOOM_CHECK(r.resume->labels == r.labels, what + ": the checkpoint was trained with other labels than --train has");
    const auto conflicts = resume_conflicts(r.resume->options, o);
    if (!conflicts.empty()) {
      std::string list;
      for (const auto& c : conflicts) list += (list.empty() ? "" : "; ") + c;
      throw loom::error(what + ": a resumed run must keep the options that decide its data order, schedule and model; "
                        "these differ: " + list);
    }
    LOOM_CHECK(!r.resume->train_rows || *r.resume->train_rows == static_cast<std::int64_t>(r.train.size()),
               what + ": the checkpoint's run had " + std::to_string(r.resume->train_rows.value_or(0)) +
                   " training rows, --train " + o.train + " gives " + std::to_string(r.train.size()));
    const run_length len = length_of(o, r.train.size());
    if (r.resume->step == len.total_steps) {
      r.finished = true;  // nothing to train; the caller reports that run's figures
      return r;
    }
    check_resume_position(*r.resume, len.batches_per_epoch, len.total_steps);
  }
  if (!owns_output) return r;
  // Last, so that a run refused above leaves no folder behind.
  std::error_code ec;
  fs::create_directories(o.output, ec);
  LOOM_CHECK(!ec && fs::is_directory(o.output),
             "--output " + o.output + ": cannot create the folder" + (ec ? " (" + ec.message() + ")" : ""));
  r.lock = output_lock(o.output);  // refuses a folder another run is using
  remove_stale_temporaries(o.output);
  // A fresh run owns its folder: an earlier run's checkpoints would be resumed from by mistake or counted by the
  // checkpoint rotation (deleting the new run's own), its model and log would pass for this run's.
  const bool continuing_here = r.resume && same_folder(r.resume->dir.parent_path(), o.output);
  if (!continuing_here) {
    const auto earlier = previous_run_files(o.output);
    if (!earlier.empty() && !o.overwrite_output)
      throw loom::error("--output " + o.output + " holds an earlier run (" + earlier.front().filename().string() +
                        (earlier.size() > 1 ? " and " + std::to_string(earlier.size() - 1) + " more" : "") +
                        "): give --overwrite-output to replace it, --resume " + o.output +
                        " to continue it, or another --output");
    // Never the files this run starts from (--model out/checkpoint-N --output out, --vocab out/vocab.txt, ...).
    for (const fs::path& input : {r.weights, r.vocab, fs::path(o.config_file)})
      for (const auto& p : earlier)
        LOOM_CHECK(input.empty() || !within(input, p),
                   "--overwrite-output would remove " + p.string() + ", which holds " + input.string() +
                       " that this run starts from; give another --output");
    for (const auto& p : earlier) {
      fs::remove_all(p, ec);
      LOOM_CHECK(!ec, p.string() + ": cannot remove the earlier run's file (" + ec.message() + ")");
    }
  }
  return r;
}

/// The learning-rate schedule by name, as transformers' get_*_schedule functions.
inline optim::lr_schedule make_schedule(const std::string& name, std::int64_t warmup, std::int64_t total) {
  if (name == "constant") return warmup > 0 ? optim::constant_schedule_with_warmup(warmup) : optim::constant_schedule();
  if (name == "cosine") return optim::cosine_schedule_with_warmup(warmup, total);
  return optim::linear_schedule_with_warmup(warmup, total);
}

template <class Precision, class Device>
class trainer {
 public:
  /// Data parallel always: without --parallel the policy is inactive (a world of one, no communicator).
  using policy_t = parallel::data_parallel<typename Precision::grad_t, Device>;
  using model_t = bert::model<Precision, policy_t, Device>;
  using T = typename model_t::T;

  /// `group`: the data-parallel policy of the run (its communicators were created before anything filled the
  /// device memory pool); default: one process.
  trainer(const train_options& o, prepared_run run, policy_t group = {})
      : o_(o), run_(std::move(run)), model_(run_.config, /*classifier_head=*/true, std::move(group)) {
    if (run_.weights.empty()) {
      bert::init_weights(model_, o_.seed);
    } else {
      const auto report = bert::load_safetensors(model_, run_.weights, o_.seed, /*reinit_mismatched_head=*/true);
      for (const auto& n : report.initialized)
        if (lead()) std::fprintf(stderr, "loom-bert: initialised %s (not in the checkpoint)\n", n.c_str());
    }
    model_.set_recompute(o_.recompute);
    // Evaluation measures the function being trained, as transformers' Trainer does: the erf GELU in fp32; in 16 bits
    // the tanh form, which training runs inside the GEMMs (nn::feed_forward) and serving uses too.
    model_.set_exact_gelu(std::is_same_v<T, float>);
    if (o_.lora_r > 0) {
      nn::lora_options lo;  // PEFT's SEQ_CLS setup: adapters on the targets, base frozen, classifier trained
      lo.r = o_.lora_r;
      lo.alpha = o_.lora_alpha;
      lo.dropout = o_.lora_dropout;
      lo.targets = nn::parse_lora_targets(o_.lora_targets);
      model_.enable_lora(lo, o_.seed);
    }
    // After enable_lora: the optimizer updates only trainable parameters (param_info::trainable).
    optim::adamw_options ao;
    ao.beta1 = o_.adam_beta1;
    ao.beta2 = o_.adam_beta2;
    ao.eps = o_.adam_eps;
    ao.weight_decay = o_.weight_decay;
    // Every rank starts from rank 0's parameters (identical anyway when all loaded the same file: made certain).
    dp().set_context("start-up");
    dp().broadcast(model_.params().flat());
    dp().attach(model_.params());  // the layout is final: ZeRO's shard of the optimizer state follows from it
    optimizer_ = std::make_unique<optim::adamw<Precision, Device>>(
        model_.params(), ao, optim::hf_decay_ranges(model_.params()), dp().optimizer_sharding());
    dp().bind(*optimizer_);
    const run_length len = length_of(o_, run_.train.size());
    steps_per_epoch_ = len.steps_per_epoch;
    total_steps_ = len.total_steps;
    warmup_steps_ = static_cast<std::int64_t>(std::ceil(o_.warmup_ratio * static_cast<double>(total_steps_)));
    schedule_ = make_schedule(o_.schedule, warmup_steps_, total_steps_);
    if (run_.resume) restore(*run_.resume);  // prepare() checked it against this run
    dp().attach(model_.params());
    if (dp().size() > 1) check_replicas(master_values(), "parameters at start-up");
  }

  model_t& model() { return model_; }
  /// The data-parallel policy (inactive for one process).
  policy_t& dp() { return model_.parallel(); }
  /// World rank 0: it logs and writes the output folder.
  bool lead() { return dp().world_rank() == 0; }

  /// Runs to the end (epochs, max steps or early stop); returns the last evaluation. Every rank of a data-parallel
  /// run calls it; rank 0 logs and writes the output folder.
  classification_report run() {
    const fs::path log_path = fs::path(o_.output) / "metrics.jsonl";
    std::ofstream log;
    if (lead()) {
      const std::string kept = log_kept(log_path);
      log.open(log_path, std::ios::trunc);
      LOOM_CHECK((log << kept).flush().good(), log_path.string() + ": cannot open for writing");
    }
    progress_line bar(total_steps_, o_.log_every);
    bar.restart(step_, sequences_);
    tensor<float, Device> loss_sum(shape{});
    assign(loss_sum, 0.0);
    std::int64_t logged_steps = 0;
    classification_report last;
    bool stop = false;
    preemption_guard preemption;
    const shard part{dp().rank(), dp().size()};
    // Allocated once for the run, sized for the largest slice of a batch; the loader keeps 4 batches collated ahead.
    staging_ring<Device> ring(staging_ring<Device>::slots_for_depth(4), packed_capacity(run_.train, o_.batch));
    while (!stop && step_ < total_steps_) {
      const auto batches =
          epoch_batches(run_.train, o_.global_micro_batch(), o_.seed, static_cast<std::uint64_t>(epoch_), true,
                        o_.group_by_length ? 50 : 0);
      batch_loader<Device> loader(ring, run_.train, batches, batch_in_epoch_, pad_id(), part,
                                  padding_free_of(o_.padding_free));
      host_batch hb;
      int micro = 0, group = 0;
      std::size_t step_rows = 0, rows_before = 0;  // global rows of this step, and of its micro-batches so far
      std::size_t tokens_before = 0;               // global tokens of the step's micro-batches so far
      bool backward_done = false;                  // this rank has run a backward in this step
      while (!stop && loader.next(hb)) {
        if (micro == 0) {
          // The step's micro-batches (an epoch may end inside a group, as in transformers' Trainer) and its rows:
          // every rank knows them all, so each scales its loss by its rows / the step's rows and the sum over ranks
          // and micro-batches is the gradient of the step's mean loss, however the rows are split.
          group = static_cast<int>(std::min<std::size_t>(o_.grad_accum, batches.size() - hb.index));
          step_rows = 0;
          for (std::size_t i = hb.index; i < hb.index + static_cast<std::size_t>(group); ++i)
            step_rows += batches[i].size();
          rows_before = tokens_before = 0;
          backward_done = false;
          dp().set_context("step " + std::to_string(step_ + 1));
        }
        const bool last_micro = micro + 1 == group;
        const index_t rows = hb.rows();
        // The word embeddings' rows this step uses, shared by every rank before the step's last backward: only those
        // are reduced (data_parallel::use_rows).
        if (rows > 0) dp().use_rows(hb.ids.data(), static_cast<std::size_t>(hb.ids.numel()));
        if (last_micro) dp().share_rows();
        // Read before release(), which clears hb.
        const std::size_t first_row = rows_before + hb.first_row, global_rows = hb.global_rows;
        const std::size_t first_token = tokens_before + hb.first_token, global_tokens = hb.global_tokens;
        if (rows > 0) {
          // The copy is enqueued, then the slot goes back: the loader refills it once that copy has completed.
          const bert::batch<Device> b = upload(hb);
          loader.release(hb);
          const double share = static_cast<double>(rows) / static_cast<double>(step_rows);
          // Dropout is keyed by (step, row or token of the step): the masks do not depend on how rows are split.
          model_.forward_loss(b, bert::mode::training, o_.seed, static_cast<std::uint64_t>(step_),
                              static_cast<std::int64_t>(first_row), static_cast<std::int64_t>(first_token));
          watch_.observe(model_.loss(), step_ + 1);
          dp().set_sync(last_micro);  // accumulation: the buckets reduce in the step's last backward only
          const grad_mode gm = backward_done ? grad_mode::accumulate : grad_mode::overwrite;
          if constexpr (Precision::loss_scaling)
            model_.backward(b, gm, scaler_.scale_tensor(), static_cast<float>(share));  // no host read of the scale
          else
            model_.backward(b, gm, static_cast<float>(share));
          backward_done = true;
          assign(loss_sum, loss_sum + model_.loss() * share);
        } else if (dp().stage() >= 2) {
          // This rank's slice of a short last batch is empty, but ZeRO-2/3 reduce in every backward (and ZeRO-3
          // gathers in every forward): the rank runs them on one idle row whose loss counts 0, joining each
          // collective in the same order.
          loader.release(hb);
          const bert::batch<Device>& b = idle_batch();
          model_.forward_loss(b, bert::mode::training, o_.seed, static_cast<std::uint64_t>(step_), 0);
          dp().set_sync(last_micro);
          if constexpr (Precision::loss_scaling) model_.backward(b, grad_mode::overwrite, scaler_.scale_tensor(), 0.0f);
          else model_.backward(b, grad_mode::overwrite, 0.0f);
        } else {
          loader.release(hb);  // this rank's slice of a short last batch is empty: it only joins the reductions
        }
        rows_before += global_rows;
        tokens_before += global_tokens;
        sequences_ += static_cast<std::int64_t>(global_rows);
        ++micro_step_;
        batch_in_epoch_ = hb.index + 1;
        if (++micro < group) continue;
        micro = 0;
        if (!backward_done) assign(model_.params().flat_grads(), 0.0);  // no rows in the whole step
        dp().finish_gradients();
        const double lr = schedule_.lr(o_.lr, step_);
        if constexpr (Precision::loss_scaling) scaler_.unscale(*optimizer_);
        if (o_.max_grad_norm > 0) optim::clip_grad_norm(*optimizer_, static_cast<float>(o_.max_grad_norm));
        else optimizer_->compute_grad_norm();
        // fp16's scaler skips the steps whose gradients overflow (that is its job): only its loss is watched.
        if constexpr (!Precision::loss_scaling) watch_.observe(optimizer_->grad_norm_view(), step_ + 1);
        optimizer_->step(lr);
        // ZeRO: every rank gets the parameters the others updated (stages 1-2: gathered while the next forward runs,
        // which waits for each unit's; evaluate() and every params() reader wait for all of them).
        dp().finish_step(/*overlap=*/true);
        if constexpr (Precision::loss_scaling) scaler_.update();
        ++step_;
        ++logged_steps;
        const double epoch_pos = static_cast<double>(epoch_) + static_cast<double>(batch_in_epoch_) / batches.size();
        if (step_ % o_.log_every == 0 || step_ == total_steps_) {
          stop_if_diverged();
          double loss_total = static_cast<double>(to<host>(loss_sum)());
          dp().reduce_on_host(&loss_total, 1, parallel::reduce_op::sum);
          const double mean_loss = loss_total / static_cast<double>(logged_steps);
          assign(loss_sum, 0.0);
          logged_steps = 0;
          last_loss_ = mean_loss;
          if (lead()) {
            bar.update(step_, epoch_pos, mean_loss, lr, sequences_, true);
            log << nlohmann::json{{"type", "train"}, {"step", step_}, {"epoch", epoch_pos}, {"loss", mean_loss},
                                  {"lr", lr}, {"grad_norm", optimizer_->grad_norm()},
                                  {"loss_scale", loss_scale()}, {"skipped_steps", skipped_steps()}}
                       .dump()
                << "\n" << std::flush;
          }
        }
        const bool epoch_end = batch_in_epoch_ >= batches.size();
        bool saved = false;
        if ((o_.eval_every > 0 && step_ % o_.eval_every == 0) || (o_.eval_every == 0 && epoch_end) ||
            step_ == total_steps_) {
          if (lead()) bar.finish_line();
          stop_if_diverged();
          last = evaluate_and_save(log, epoch_pos, stop);
          if (epoch_end) {
            ++epoch_;
            batch_in_epoch_ = 0;
          }
          save(epoch_pos);
          saved = true;
        }
        if (step_ >= total_steps_) stop = true;
        if (!stop && preemption_requested()) {
          // Every rank saw the request at the same step: the checkpoint below is written once, all ranks agree.
          if (lead()) bar.finish_line();
          stop_if_diverged();
          if (epoch_end && !saved) {
            ++epoch_;
            batch_in_epoch_ = 0;
          }
          if (!saved) save(epoch_pos);
          throw preempted("stopped by a signal after step " + std::to_string(step_) + " of " +
                          std::to_string(total_steps_) + "; checkpoint " +
                          (fs::path(o_.output) / checkpoint_name(step_)).string() +
                          " written; continue with --resume " + o_.output);
        }
      }
      if (batch_in_epoch_ >= batches.size()) {
        ++epoch_;
        batch_in_epoch_ = 0;
      }
    }
    if (lead()) bar.finish_line();
    dp().settle();
    stop_if_diverged();
    // ZeRO-3 + LoRA: the best adapter is merged into whole weights below, which the model holds again after this.
    if (o_.lora_r > 0 && dp().stage() >= 3) dp().unshard(model_.params());
    if (lead() && o_.lora_r > 0 && fs::exists(fs::path(o_.output) / "adapter" / "adapter_config.json")) {
      // The output folder gets the best adapter folded into the base weights: an ordinary HF checkpoint.
      bert::load_lora_adapter(model_, fs::path(o_.output) / "adapter");
      model_.merge_lora();
      save_pretrained_into(model_, o_.output, {model_.params().params(), parameters_f32(model_)}, run_.vocab,
                           run_.tokenizer_config);
    }
    if (dp().active()) dp().control().barrier();  // no rank reports success before rank 0 wrote the model
    return last;
  }

  /// Predictions and metrics of the current model on `d`. Data parallel: each rank predicts a contiguous slice of
  /// the rows and the predictions and losses are summed over the ranks, so every rank returns the whole report.
  classification_report evaluate(const dataset& d) {
    dp().settle();
    const std::size_t eb = o_.eval_batch ? o_.eval_batch : 2 * o_.batch;
    std::vector<std::int32_t> predictions(d.size(), 0);
    double loss = 0;
    // Collated on this thread into two staging slots used in turn; a slot is refilled only after its last copy.
    const std::size_t capacity = packed_capacity(d, eb);
    if (!eval_ring_ || eval_ring_->capacity() < capacity) {
      eval_ring_.reset();  // frees the old slots (after their copies) before allocating the new ones
      eval_ring_ = std::make_unique<staging_ring<Device>>(2, capacity);
    }
    const shard part{dp().rank(), dp().size()};
    std::size_t k = 0;
    // ZeRO-3 gathers every unit in each forward: every rank runs as many as the rank with the most batches, the
    // missing ones on an idle row whose prediction is dropped.
    std::size_t most = 0;
    for (int r = 0; r < dp().size(); ++r) {
      const shard other{r, dp().size()};
      most = std::max(most, (other.end(d.size()) - other.begin(d.size()) + eb - 1) / eb);
    }
    const std::size_t mine = (part.end(d.size()) - part.begin(d.size()) + eb - 1) / eb;
    if (dp().stage() >= 3)
      for (std::size_t idle = mine; idle < most; ++idle) model_.forward(idle_batch(), bert::mode::inference);
    for (std::size_t at = part.begin(d.size()); at < part.end(d.size()); at += eb) {
      std::vector<std::size_t> rows(std::min(eb, part.end(d.size()) - at));
      std::iota(rows.begin(), rows.end(), at);
      const std::size_t slot = k++ % eval_ring_->size();
      eval_ring_->wait_idle(slot);
      host_batch hb;
      collate(d, rows, pad_id(), eval_ring_->block(slot), hb, 0, padding_free_of(o_.padding_free));
      const bert::batch<Device> b = upload(hb);
      eval_ring_->mark_in_use(slot);
      model_.forward(b, bert::mode::inference);
      const auto logits = to<host>(contiguous(model_.logits()));
      const index_t C = logits.extent(1);
      std::vector<float> z(static_cast<std::size_t>(C));
      for (std::size_t r = 0; r < rows.size(); ++r) {
        for (index_t c = 0; c < C; ++c)
          z[static_cast<std::size_t>(c)] = convert<float>(logits(static_cast<index_t>(r), c));
        const auto row = summarize_logits(z);
        loss += row.log_sum_exp - z[static_cast<std::size_t>(d.labels[rows[r]])];
        predictions[rows[r]] = row.best;
      }
    }
    // Each row was predicted by exactly one rank (the others hold 0 there): the sum is every rank's predictions.
    dp().reduce_on_host(predictions.data(), predictions.size(), parallel::reduce_op::sum);
    dp().reduce_on_host(&loss, 1, parallel::reduce_op::sum);
    auto report = classify_report(d.labels, predictions, static_cast<int>(run_.labels.size()));
    report.loss = loss / static_cast<double>(d.size());
    return report;
  }

  const std::vector<std::string>& labels() const { return run_.labels; }
  std::int64_t steps() const { return step_; }
  double last_loss() const { return last_loss_; }

 private:
  float loss_scale() const {
    if constexpr (Precision::loss_scaling) return scaler_.scale();
    else return 1.0f;
  }
  std::int64_t skipped_steps() const {
    if constexpr (Precision::loss_scaling) return scaler_.state().skipped_steps;
    else return 0;
  }
  /// Whether writing the model is collective: its values are gathered from ZeRO shards or tensor-parallel slices.
  bool gathered() { return optimizer_->sharding().sharded() || dp().tensor_size() > 1; }

  /// Parameters as fp32 in the flat layout: the optimizer's master copy for mixed precision (gathered from every
  /// rank's shard under ZeRO: collective then), else the model's own.
  tensor<float, host> master_values() {
    if (optimizer_->master().numel() == 0)
      return dp().stage() >= 3 ? dp().gather_state(dp().packed_params()) : parameters_f32(model_);
    const tensor<float, host> master = optimizer_->master().to_host();
    return optimizer_->sharding().sharded() ? dp().gather_state(master) : master;
  }

  /// Ends the run with an error if a loss or gradient norm was not finite; called before anything is logged,
  /// evaluated or saved, so the output folder keeps the last good model and checkpoints.
  /// Data parallel: the ranks agree (a rank whose loss overflowed stops them all, at the same point).
  void stop_if_diverged() {
    std::int64_t bad = watch_.first_bad_step().value_or(-1);
    dp().reduce_over_world(&bad, 1, parallel::reduce_op::max);
    if (bad >= 0) diverged("the loss or gradient norm of step " + std::to_string(bad) + " is not finite (inf or NaN)");
  }

  /// Collective: whether any rank got SIGTERM/SIGINT; every rank gets the same answer at the same step.
  bool preemption_requested() {
    std::int32_t flag = preemption_guard::requested() != 0 ? 1 : 0;
    dp().reduce_over_world(&flag, 1, parallel::reduce_op::max);
    return flag != 0;
  }

  /// Collective: refuses to go on when the ranks' parameters (`values`: master_values()) are no longer identical.
  void check_replicas(const tensor<float, host>& values, const std::string& what) {
    parallel::check_replicas(dp().replicas(),
                             parallel::fnv1a(values.data(), static_cast<std::size_t>(values.numel()) * sizeof(float)),
                             what);
  }

  [[noreturn]] void diverged(const std::string& what) const {
    fs::path latest;
    try {
      latest = resolve_checkpoint(o_.output);
    } catch (const loom::error&) {
    }
    throw parallel::agreed_error("training diverged: " + what + ", so the run stopped and saved nothing after it; " +
                      (best_ ? "--output " + o_.output + " keeps the best model of the evaluations before it"
                             : std::string("no evaluation came before it, so --output holds no model")) +
                      (latest.empty() ? std::string() : ", the last checkpoint is " + latest.string()) +
                      " (a lower --lr or --max-grad-norm may help)");
  }

  std::int32_t pad_id() const { return static_cast<std::int32_t>(run_.config.pad_token_id.value_or(0)); }

  /// One row of two padding tokens, label 0: what a ZeRO-2/3 rank without rows computes to join the collectives.
  const bert::batch<Device>& idle_batch() {
    if (idle_.input_ids.numel() == 0) {
      tensor<std::int32_t, host> ids({1, 2}), types({1, 2}), lengths({1}), labels({1});
      assign(ids, static_cast<double>(pad_id()));
      assign(types, 0.0);
      assign(lengths, 2.0);
      assign(labels, 0.0);
      idle_ = {to<Device>(ids), to<Device>(types), to<Device>(lengths), to<Device>(labels)};
    }
    return idle_;
  }

  // One copy of the packed batch on the current stream; from a page-locked slot (CUDA) it is asynchronous, so the
  // caller marks the slot in use (loader.release / mark_in_use) right after. On the host it is a plain copy.
  bert::batch<Device> upload(const host_batch& hb) {
    const batch_tensors<Device> t = to_device<Device>(hb);
    return {t.ids, t.types, t.lengths, t.labels, t.positions, t.offsets, t.longest};
  }

  // What the log starts with. A fresh run starts a fresh log. A resumed run keeps what was logged up to its
  // checkpoint's step and drops the lines an interrupted run wrote after it, which are about to be logged again:
  // the log then reads as one run.
  std::string log_kept(const fs::path& path) const {
    std::string kept;
    if (!run_.resume) return kept;
    std::ifstream in(path);  // absent: nothing to keep
    for (std::string line; std::getline(in, line);) {
      // Strict parsing (bounded nesting): a damaged line is kept as it is, never a reason to crash a resume.
      const auto r = io::detail::parse_json_strict(line);
      const nlohmann::json& j = r.value;
      if (r.kind != io::detail::json_parse_result::failure::none || !j.is_object() || !j.contains("step") ||
          !j["step"].is_number_integer() || j["step"].get<std::int64_t>() <= step_)
        kept += line + "\n";
    }
    return kept;
  }

  double metric_value(const classification_report& r) const {
    if (o_.metric == "loss") return -r.loss;
    if (o_.metric == "macro_f1") return r.macro_f1;
    return r.accuracy;
  }

  classification_report evaluate_and_save(std::ofstream& log, double epoch_pos, bool& stop) {
    const auto r = evaluate(run_.dev);
    // Finite losses and gradients can still leave weights so large that the logits overflow.
    if (!std::isfinite(r.loss))
      diverged("the evaluation at step " + std::to_string(step_) + " gave a non-finite loss (the weights blew up)");
    nlohmann::json j = r.to_json(run_.labels);
    j["type"] = "eval";
    j["step"] = step_;
    j["epoch"] = epoch_pos;
    if (lead()) {
      log << j.dump() << "\n" << std::flush;
      std::fprintf(stderr, "eval step %lld: accuracy %.4f  macro-F1 %.4f  loss %.4f (%zu dev rows)\n",
                   static_cast<long long>(step_), r.accuracy, r.macro_f1, r.loss, run_.dev.size());
    }
    const double v = metric_value(r);
    if (!best_ || v > *best_) {
      best_ = v;
      evals_without_improvement_ = 0;
      // The best model so far is the one in the output folder (HF format: transformers can load it directly),
      // written by rank 0 (the fp32 values gathered from every rank's shard first under ZeRO).
      const bool whole_model = o_.lora_r == 0, sharded_params = dp().stage() >= 3;
      tensor<float, host> values;
      nn::parameter_values weights;
      if (whole_model && (lead() || gathered())) weights = dp().whole(model_.params(), master_values(), lead());
      // ZeRO-3 + LoRA: the adapter as the model holds it (the parameters' type, as save_lora_adapter reads it).
      if (!whole_model && sharded_params) values = dp().gather_state(dp().packed_params());
      if (!lead()) {
        // written by rank 0 alone
      } else if (!whole_model) {
        // The best adapter (PEFT format); the merged model is written once training ends (see finish()).
        bert::save_lora_adapter(model_, fs::path(o_.output) / "adapter", run_.weights.parent_path().string(),
                                sharded_params ? &values : nullptr);
      } else {
        save_pretrained_into(model_, o_.output, weights, run_.vocab, run_.tokenizer_config);
      }
    } else if (o_.early_stopping > 0 && ++evals_without_improvement_ >= o_.early_stopping) {
      if (lead())
        std::fprintf(stderr, "early stopping: %s did not improve for %d evaluations\n", o_.metric.c_str(),
                     o_.early_stopping);
      stop = true;
    }
    return r;
  }

  /// Collective: checks that the replicas agree, then writes the checkpoint: rank 0 makes a temporary folder, every
  /// rank that holds a part of the optimizer state writes its shard there in parallel (rank 0 alone when the state
  /// is replicated), rank 0 adds the model and trainer state and renames the folder into place. Every rank agrees on
  /// every failure, so a checkpoint is complete or absent on all of them and no rank runs ahead of one that failed.
  void save(double epoch_pos) {
    const bool replicated = dp().size() > 1, many = dp().world_size() > 1;
    const bool sharded = optimizer_->sharding().sharded();
    // The parameters' host copy (gathered from the shards under ZeRO), made once for the replica check and the model
    // (whole: the tensor-parallel slices gathered).
    const tensor<float, host> values = master_values();
    if (replicated) check_replicas(values, "parameters at step " + std::to_string(step_));
    const nn::parameter_values weights = dp().whole(model_.params(), values, lead());
    std::string failure;
    const auto attempt = [&](auto&& work) {
      if (failure.empty()) try {
          work();
        } catch (const std::exception& e) {
          failure = e.what();
        }
      if (many) parallel::agree_on_error(dp().control(), failure);
      else if (!failure.empty()) throw loom::error(failure);
    };
    fs::path tmp;
    attempt([&] {
      if (lead()) tmp = begin_checkpoint(o_.output, step_);
    });
    if (many) tmp = parallel::all_gather_strings(dp().control(), tmp.string()).front();
    // One shard per tensor-parallel slice of each replica that holds a part of the state (the first replica's
    // alone when the state is replicated).
    const int tp = dp().tensor_size(), shards = tp * (sharded ? dp().size() : 1);
    try {
      attempt([&] {
        if (!sharded && dp().rank() != 0) return;
        const tensor<float, host> m = optimizer_->exp_avg().to_host(), v = optimizer_->exp_avg_sq().to_host();
        write_optimizer_shard(tmp / optimizer_shard_name(dp().tensor_rank() + tp * (sharded ? dp().rank() : 0), shards),
                              model_.params(), optimizer_->sharding().pieces, {{"exp_avg", &m}, {"exp_avg_sq", &v}},
                              dp().tensor_rank(), tp);
      });
      attempt([&] {
        if (!lead()) return;
        std::vector<std::string> files;
        for (int r = 0; r < shards; ++r) files.push_back(optimizer_shard_name(r, shards));
        commit_checkpoint(model_, o_.output, step_, tmp, weights, run_.vocab, run_.tokenizer_config,
                          checkpoint_meta(epoch_pos, files), o_.save_total_limit);
      });
    } catch (...) {
      if (lead()) abandon_checkpoint(tmp);
      throw;
    }
  }

  nlohmann::json checkpoint_meta(double epoch_pos, const std::vector<std::string>& shard_files) {
    return {{"step", step_},
            {"micro_step", micro_step_},
            {"epoch", epoch_},
            {"batch_in_epoch", batch_in_epoch_},
            {"epoch_position", epoch_pos},
            {"sequences", sequences_},
            {"best_metric", best_ ? nlohmann::json(*best_) : nlohmann::json(nullptr)},
            {"evals_without_improvement", evals_without_improvement_},
            {"optimizer_steps", optimizer_->steps()},
            {"optimizer_shards", shard_files},
            {"zero_stage", dp().stage()},
            {"loss_scaler", Precision::loss_scaling ? nlohmann::json(scaler_.state()) : nlohmann::json(nullptr)},
            {"labels", run_.labels},
            {"train_rows", run_.train.size()},
            {"options", o_.to_json()}};
  }

  void restore(const resume_state& st) {
    const fs::path& dir = st.dir;
    // The checkpoint's model.safetensors holds the fp32 master values: the model gets them rounded to param_t and
    // the optimizer gets them exactly, so the run continues bit for bit.
    const bool sharded_params = dp().stage() >= 3;
    if (!sharded_params) bert::load_safetensors(model_, dir / "model.safetensors");
    const auto weights = io::safetensors_file::open(dir / "model.safetensors");
    // The shards may come from another world size or ZeRO stage: each is reassembled in this run's flat layout,
    // then this rank keeps its own pieces (all of it unless sharded).
    const bool sharded = optimizer_->sharding().sharded();
    const auto place = [&](const optim::state_buffer<Device>& dst, const tensor<float, host>& flat) {
      dst.load(sharded ? dp().local_state(flat) : flat);
    };
    const int tr = dp().tensor_rank(), tn = dp().tensor_size();
    place(optimizer_->exp_avg(), read_optimizer_state(st.optimizer_shards, model_.params(), "exp_avg", tr, tn));
    place(optimizer_->exp_avg_sq(),
          read_optimizer_state(st.optimizer_shards, model_.params(), "exp_avg_sq", tr, tn));
    if (optimizer_->master().numel() > 0 || sharded_params) {
      // The fp32 values in this run's flat layout (this rank's tensor-parallel slices).
      tensor<float, host> master({model_.params().layout_size()});
      assign(master, 0.0);
      for (const auto& p : model_.params().params()) {
        const auto v = weights.to_f32(model_.has_classifier() ? hf_name(p.name) : p.name);
        LOOM_CHECK(static_cast<index_t>(v.size()) == nn::logical_extents(p, tn).numel(),
                   (dir / "model.safetensors").string() + ": tensor '" + p.name + "' has " + std::to_string(v.size()) +
                       " values, the model " + std::to_string(nn::logical_extents(p, tn).numel()));
        for (const nn::slice_run& r : nn::slice_runs(p, tr, tn))
          std::copy_n(v.begin() + r.logical, r.count, master.data() + p.offset + r.local);
      }
      if (optimizer_->master().numel() > 0) place(optimizer_->master(), master);
      if (sharded_params) {
        dp().scatter_state(master, dp().packed_params());  // rounded to the parameters' type
        dp().params_changed();
      }
    }
    // Data parallel: rank 0's state everywhere (identical anyway when every rank read the same checkpoint).
    dp().broadcast(model_.params().flat());
    if (!sharded) {
      dp().broadcast(optimizer_->exp_avg().on_device());
      dp().broadcast(optimizer_->exp_avg_sq().on_device());
      if (optimizer_->master().numel() > 0) dp().broadcast(optimizer_->master().on_device());
    }
    optimizer_->set_steps(st.optimizer_steps);
    if constexpr (Precision::loss_scaling) {
      LOOM_CHECK(st.loss_scaler.has_value(), (dir / "trainer_state.json").string() +
                                                 ": field \"loss_scaler\": missing, which fp16 training needs");
      scaler_.load_state(*st.loss_scaler);
    }
    step_ = st.step;
    micro_step_ = st.micro_step;
    epoch_ = st.epoch;
    batch_in_epoch_ = st.batch_in_epoch;
    sequences_ = st.sequences;
    best_ = st.best_metric;
    evals_without_improvement_ = st.evals_without_improvement;
    if (lead())
      std::fprintf(stderr, "loom-bert: resumed from %s at step %lld (epoch %lld, batch %zu)\n", dir.string().c_str(),
                   static_cast<long long>(step_), static_cast<long long>(epoch_), batch_in_epoch_);
  }

  train_options o_;
  prepared_run run_;
  model_t model_;
  std::unique_ptr<optim::adamw<Precision, Device>> optimizer_;
  precision::loss_scaler<Device> scaler_;
  optim::lr_schedule schedule_;
  std::int64_t steps_per_epoch_ = 0, total_steps_ = 0, warmup_steps_ = 0;
  std::int64_t step_ = 0, micro_step_ = 0, epoch_ = 0, sequences_ = 0;
  std::size_t batch_in_epoch_ = 0;
  std::optional<double> best_;
  int evals_without_improvement_ = 0;
  double last_loss_ = 0;
  std::unique_ptr<staging_ring<Device>> eval_ring_;
  bert::batch<Device> idle_;  // idle_batch()
  finite_watch<Device> watch_;  // evaluate()'s staging slots, kept between evaluations
};

}  // namespace loom::train
