// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// Tensor-parallel nn::linear: two ranks of a group run as two threads, each with its own param_store holding its
// shard of one full weight, and the group's all_reduce_sum a real element-wise sum across them. Forward outputs,
// weight, bias and input gradients (overwritten and accumulated) of column-split (single and packed Q/K/V-style
// blocks), row-split and unsplit layers against fp64 references of the whole layer; the shapes, units and split
// dimensions each rank registers; and the feature counts a group of two refuses.
#include <array>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <loom/nn/linear.hpp>
#include <loom/nn/lora_linear.hpp>

#include "test_util.hpp"

using namespace loom;
using autograd::grad_mode;
using parallel::split;

namespace {

/// std::barrier with a deadline: a rank that calls a collective its peer never calls (a bug in the layer under
/// test) fails the test with a message instead of hanging it.
class timed_barrier {
 public:
  explicit timed_barrier(int n) : n_(n) {}
  void arrive_and_wait(int rank) {
    std::unique_lock lock(m_);
    const std::uint64_t gen = generation_;
    if (++waiting_ == n_) {
      waiting_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    if (!cv_.wait_for(lock, std::chrono::seconds(20), [&] { return generation_ != gen; }))
      throw std::runtime_error("rank " + std::to_string(rank) +
                               ": waited 20 s in all_reduce_sum for a rank that never joined (unmatched collective)");
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int n_, waiting_ = 0;
  std::uint64_t generation_ = 0;
};

/// What the ranks of a group share: the barrier and one staging buffer per rank.
struct thread_group {
  explicit thread_group(int n) : size(n), barrier(n), staged(static_cast<std::size_t>(n)) {}
  int size;
  timed_barrier barrier;
  std::vector<std::vector<double>> staged;
};

/// A rank of a thread_group: all_reduce_sum leaves every rank holding the element-wise sum, added in rank order
/// (rank 0's value + rank 1's + ...) in T's arithmetic, so both ranks get bit-identical results.
struct thread_group_policy {
  static constexpr std::string_view name = "thread_group";
  thread_group* group = nullptr;
  int rank = 0;
  int reductions = 0;

  void before_forward(const parallel::unit&) {}
  void before_backward(const parallel::unit&) {}
  void after_use(const parallel::unit&) {}
  void grads_ready(const parallel::unit&, const parallel::ranges&) {}

  int tensor_rank() const { return rank; }
  int tensor_size() const { return group->size; }
  template <class T, class Device>
  void all_reduce_sum(const tensor<T, Device>& t) {
    static_assert(std::is_same_v<Device, host>, "the thread group reduces host tensors");
    ++reductions;
    const strided<T> v = t.view();
    std::vector<double>& mine = group->staged[static_cast<std::size_t>(rank)];
    mine.resize(static_cast<std::size_t>(t.numel()));
    for (index_t i = 0; i < t.numel(); ++i) mine[i] = static_cast<double>(v.data[v.offset_of(i)]);  // exact
    group->barrier.arrive_and_wait(rank);
    for (const auto& other : group->staged)
      if (other.size() != mine.size())
        throw std::runtime_error("all_reduce_sum: ranks reduce tensors of different sizes");
    for (index_t i = 0; i < t.numel(); ++i) {
      T sum = static_cast<T>(group->staged[0][i]);
      for (std::size_t r = 1; r < group->staged.size(); ++r) sum = sum + static_cast<T>(group->staged[r][i]);
      v.data[v.offset_of(i)] = sum;
    }
    group->barrier.arrive_and_wait(rank);  // nobody stages the next reduction before every rank has read this one
  }
};
static_assert(parallel::policy<thread_group_policy>);

using split_linear = nn::linear<precision::fp32, thread_group_policy, host>;
constexpr int ranks = 2;

/// One layer's full data, float values held as doubles (the fp64 references use exactly what the ranks hold).
struct full_layer {
  index_t n, in, out;
  std::vector<double> w, b, x, dy, dx0, dw0, db0;  // dx0, dw0, db0: what the gradients hold before backward
  std::vector<double> y, dw, db, dx;               // fp64 references

  full_layer(index_t rows, index_t in_features, index_t out_features, unsigned seed)
      : n(rows), in(in_features), out(out_features) {
    auto draw = [&](const shape& s) { return test::values(test::random_tensor<float>(s, seed++)); };
    w = draw({out, in});
    b = draw({out});
    x = draw({n, in});
    dy = draw({n, out});
    dx0 = draw({n, in});
    dw0 = draw({out, in});
    db0 = draw({out});
    y.assign(n * out, 0.0);
    dw.assign(out * in, 0.0);
    db.assign(out, 0.0);
    dx.assign(n * in, 0.0);
    for (index_t r = 0; r < n; ++r)
      for (index_t o = 0; o < out; ++o) {
        double s = b[o];
        for (index_t i = 0; i < in; ++i) s += x[r * in + i] * w[o * in + i];
        y[r * out + o] = s;
        db[o] += dy[r * out + o];
        for (index_t i = 0; i < in; ++i) {
          dw[o * in + i] += dy[r * out + o] * x[r * in + i];
          dx[r * in + i] += dy[r * out + o] * w[o * in + i];
        }
      }
  }
};

/// Which rows and columns of the full layer rank `rank` holds, written from the Megatron-LM definitions: a column
/// split keeps out/ranks rows of every block (rows [r*rows, (r+1)*rows) of block b, b's rows being
/// [b*out/blocks, (b+1)*out/blocks) of the full weight); a row split keeps columns [r*in/ranks, (r+1)*in/ranks).
struct shard {
  split how;
  index_t blocks, in, out;
  int rank;
  index_t local_in() const { return how == split::row ? in / ranks : in; }
  index_t local_out() const { return how == split::column ? out / ranks : out; }
  index_t full_out(index_t o) const {
    if (how != split::column) return o;
    const index_t per_rank = out / blocks / ranks;
    return (o / per_rank) * (out / blocks) + rank * per_rank + o % per_rank;
  }
  index_t full_in(index_t i) const { return how == split::row ? rank * local_in() + i : i; }
};

/// What one rank saw: its outputs and gradients in its local layout, and the metadata of what it registered.
struct rank_result {
  std::vector<double> y, dw, db, dx;
  std::vector<nn::param_info> params;
  int reductions = 0;
  std::string error;
};

struct layer_case {
  const char* what;
  split how;
  std::vector<std::string> modules;
  index_t in, out;
};

/// Fills a host tensor from the full data through an index map (local element -> full element).
template <class Map>
void fill(const tensor<float, host>& t, const std::vector<double>& full, Map at) {
  const index_t rows = t.extent(0), cols = t.rank() > 1 ? t.extent(1) : 1;
  for (index_t r = 0; r < rows; ++r)
    for (index_t c = 0; c < cols; ++c) {
      float& e = t.rank() > 1 ? t(r, c) : t(r);
      e = static_cast<float>(full[at(r, c)]);
    }
}

/// One rank: register its shard, load it from the full weights, forward, backward.
rank_result run_rank(thread_group_policy& group, const layer_case& c, const full_layer& f, grad_mode param_mode,
                     grad_mode input_mode) {
  rank_result res;
  const index_t blocks = static_cast<index_t>(c.modules.size());
  const shard s{c.how, blocks, c.in, c.out, group.rank};
  const index_t li = s.local_in(), lo = s.local_out(), rows = lo / blocks, n = f.n;
  nn::param_store<float, host> store;
  split_linear lin(group, {c.modules, c.in, c.out, parallel::unit::layer(3), c.how});
  lin.register_params(store);
  res.params = store.params();
  store.allocate();
  lin.bind(store);
  // Block b's local row j is row full_out(b * rows + j) of the whole weight.
  auto weight_at = [&](index_t b) {
    return [&, b](index_t j, index_t k) { return s.full_out(b * rows + j) * c.in + s.full_in(k); };
  };
  auto bias_at = [&](index_t b) { return [&, b](index_t j, index_t) { return s.full_out(b * rows + j); }; };
  for (index_t b = 0; b < blocks; ++b) {
    fill(store.get(c.modules[b] + ".weight"), f.w, weight_at(b));
    fill(store.get(c.modules[b] + ".bias"), f.b, bias_at(b));
  }
  const tensor<float, host> x({n, li}), y({n, lo}), dy({n, lo}), dx({n, li});
  fill(x, f.x, [&](index_t r, index_t k) { return r * c.in + s.full_in(k); });
  fill(dy, f.dy, [&](index_t r, index_t o) { return r * c.out + s.full_out(o); });
  fill(dx, f.dx0, [&](index_t r, index_t k) { return r * c.in + s.full_in(k); });
  lin.forward(x, y);

  store.allocate_grads();
  lin.bind_grads(store);
  for (index_t b = 0; b < blocks; ++b) {  // what the gradients hold before: overwritten or added to
    fill(store.grad(c.modules[b] + ".weight"), f.dw0, weight_at(b));
    fill(store.grad(c.modules[b] + ".bias"), f.db0, bias_at(b));
  }
  nn::ones_vector<float, host> ones;
  lin.backward(dy, x, dx, param_mode, input_mode, ones);

  res.y = test::values(y);
  res.dx = test::values(dx);
  for (index_t b = 0; b < blocks; ++b) {  // read back through the store's names, block by block
    const auto w = test::values(store.grad(c.modules[b] + ".weight"));
    const auto bias = test::values(store.grad(c.modules[b] + ".bias"));
    res.dw.insert(res.dw.end(), w.begin(), w.end());
    res.db.insert(res.db.end(), bias.begin(), bias.end());
  }
  res.reductions = group.reductions;
  return res;
}

/// Runs `c` on a group of two threads.
std::array<rank_result, ranks> run_group(const layer_case& c, const full_layer& f, grad_mode param_mode,
                                         grad_mode input_mode) {
  thread_group g(ranks);
  std::array<rank_result, ranks> out;
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        thread_group_policy p{&g, r};
        out[r] = run_rank(p, c, f, param_mode, input_mode);
      } catch (const std::exception& e) {
        out[r].error = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return out;
}

const char* mode_name(grad_mode m) { return m == grad_mode::overwrite ? "overwrite" : "accumulate"; }

}  // namespace

TEST_CASE("tensor-parallel linear: each rank's shard computes its part of the whole layer", "[nn][linear][parallel]") {
  constexpr index_t n = 7;
  const std::vector<layer_case> cases = {
      {"column split", split::column, {"dense"}, 10, 12},
      {"column split of packed q/k/v", split::column, {"q", "k", "v"}, 10, 12},
      {"row split", split::row, {"dense"}, 10, 6},
      {"no split", split::none, {"dense"}, 10, 6},
  };
  unsigned seed = 100;
  for (const layer_case& c : cases)
    for (const grad_mode param_mode : {grad_mode::overwrite, grad_mode::accumulate})
      for (const grad_mode input_mode : {grad_mode::overwrite, grad_mode::accumulate}) {
        INFO(c.what << ", parameter gradients " << mode_name(param_mode) << ", input gradient "
                    << mode_name(input_mode));
        const full_layer f(n, c.in, c.out, seed += 10);
        const auto results = run_group(c, f, param_mode, input_mode);
        const index_t blocks = static_cast<index_t>(c.modules.size());
        for (int r = 0; r < ranks; ++r) {
          const rank_result& res = results[r];
          INFO("rank " << r);
          REQUIRE(res.error == "");  // prints what the rank threw
          const shard s{c.how, blocks, c.in, c.out, r};
          const index_t li = s.local_in(), lo = s.local_out();
          std::vector<double> y(n * lo), dw(lo * li), db(lo), dx(n * li);
          const bool acc_p = param_mode == grad_mode::accumulate, acc_x = input_mode == grad_mode::accumulate;
          for (index_t o = 0; o < lo; ++o) {
            const index_t fo = s.full_out(o);
            // Forward: a column split's y is this rank's columns of the whole y; a row split's y is the whole y
            // (the partial products summed, the bias added once).
            for (index_t i = 0; i < n; ++i) y[i * lo + o] = f.y[i * c.out + fo];
            db[o] = f.db[fo] + (acc_p ? f.db0[fo] : 0.0);  // a row split's bias gradient is whole on every rank
            for (index_t k = 0; k < li; ++k) {
              const index_t fi = s.full_in(k);
              dw[o * li + k] = f.dw[fo * c.in + fi] + (acc_p ? f.dw0[fo * c.in + fi] : 0.0);
            }
          }
          // dx sums over every output feature of the whole layer: a column split gets it from the all-reduce, a
          // row split holds all outputs of its input columns.
          for (index_t i = 0; i < n; ++i)
            for (index_t k = 0; k < li; ++k) {
              const index_t fi = s.full_in(k);
              dx[i * li + k] = f.dx[i * c.in + fi] + (acc_x ? f.dx0[i * c.in + fi] : 0.0);
            }
          test::check_close(res.y, y, 1e-5, "y");
          test::check_close(res.dw, dw, 1e-5, "dW");
          test::check_close(res.db, db, 1e-5, "db");
          test::check_close(res.dx, dx, 1e-5, "dx");
          // One collective per pass that needs it: the row split's forward, the column split's input gradient.
          CHECK(res.reductions == (c.how == split::none ? 0 : 1));
        }
        // Both ranks of an all-reduced result hold the same bits.
        if (c.how == split::row) CHECK(results[0].y == results[1].y);
        if (c.how == split::column) CHECK(results[0].dx == results[1].dx);
      }
}

TEST_CASE("tensor-parallel linear registers local shards with their unit and split dimension",
          "[nn][linear][parallel]") {
  thread_group g(ranks);
  thread_group_policy p{&g, 1};  // no collective runs: registration needs only the group's size
  const parallel::unit u = parallel::unit::layer(5);
  auto check_params = [&](const layer_case& c, const std::vector<std::pair<std::string, shape>>& want_shapes,
                          int weight_dim, int bias_dim) {
    INFO(c.what);
    nn::param_store<float, host> store;
    split_linear(p, {c.modules, c.in, c.out, u, c.how}).register_params(store);
    const auto& params = store.params();
    REQUIRE(params.size() == want_shapes.size());
    for (std::size_t i = 0; i < params.size(); ++i) {
      INFO(params[i].name);
      CHECK(params[i].name == want_shapes[i].first);
      CHECK(params[i].extents.str() == want_shapes[i].second.str());
      CHECK(params[i].unit.str() == u.str());
      CHECK(params[i].split_dim == (params[i].name.ends_with(".weight") ? weight_dim : bias_dim));
    }
    // Packed blocks: the weights of a q/k/v layer are one contiguous [3 * rows, in] matrix, as are the biases.
    for (std::size_t i = 1; i < params.size(); ++i)
      if (params[i].name.ends_with(".weight") == params[i - 1].name.ends_with(".weight"))
        CHECK(params[i].offset == params[i - 1].offset + params[i - 1].numel());
  };
  check_params({"column", split::column, {"dense"}, 10, 12}, {{"dense.weight", {6, 10}}, {"dense.bias", {6}}}, 0, 0);
  check_params({"packed column", split::column, {"q", "k", "v"}, 10, 12},
               {{"q.weight", {2, 10}}, {"k.weight", {2, 10}}, {"v.weight", {2, 10}},
                {"q.bias", {2}}, {"k.bias", {2}}, {"v.bias", {2}}},
               0, 0);
  check_params({"row", split::row, {"dense"}, 10, 6}, {{"dense.weight", {6, 5}}, {"dense.bias", {6}}}, 1, -1);
  check_params({"none", split::none, {"dense"}, 10, 6}, {{"dense.weight", {6, 10}}, {"dense.bias", {6}}}, -1, -1);
}

TEST_CASE("tensor-parallel linear refuses features a group of two cannot split", "[nn][linear][parallel]") {
  thread_group g(ranks);
  thread_group_policy p{&g, 0};
  const parallel::unit u = parallel::unit::head();
  auto build = [&](index_t in, index_t out, split how, std::vector<std::string> modules = {"dense"}) {
    return split_linear(p, {std::move(modules), in, out, u, how});
  };
  // Column: each block's rows must halve (9 rows in 3 blocks is 3 per block: odd).
  CHECK_THROWS_AS(build(4, 5, split::column), invalid_argument);
  CHECK_THROWS_AS(build(4, 9, split::column, {"q", "k", "v"}), invalid_argument);
  CHECK_THROWS_AS(build(4, 10, split::column, {"q", "k", "v"}), invalid_argument);  // not 3 equal blocks
  // Row: the input features must halve; the output features need not.
  CHECK_THROWS_AS(build(5, 4, split::row), invalid_argument);
  CHECK_THROWS_AS(build(5, 4, split::row), loom::error);
  CHECK_NOTHROW(build(4, 5, split::row));
  CHECK_NOTHROW(build(5, 4, split::column));
  CHECK_NOTHROW(build(5, 6, split::column, {"q", "k", "v"}));  // one row of each block per rank
  // No split: nothing is divided.
  CHECK_NOTHROW(build(5, 7, split::none));
}

namespace {

/// A LoRA adapter beside a frozen linear layer, whole: y = x W^T + b + s (x A^T) B^T and its gradients, in fp64.
struct full_adapter {
  index_t rank;
  double scale;
  std::vector<double> a, b, y, da, db, dx;  // A [r, in], B [out, r]; references

  full_adapter(const full_layer& f, index_t r, double s, unsigned seed) : rank(r), scale(s) {
    a = test::values(test::random_tensor<float>({r, f.in}, seed));
    b = test::values(test::random_tensor<float>({f.out, r}, seed + 1));
    y = f.y;
    dx = f.dx;
    da.assign(r * f.in, 0.0);
    db.assign(f.out * r, 0.0);
    for (index_t n = 0; n < f.n; ++n) {
      std::vector<double> u(r, 0.0), du(r, 0.0);
      for (index_t k = 0; k < r; ++k)
        for (index_t i = 0; i < f.in; ++i) u[k] += f.x[n * f.in + i] * a[k * f.in + i];
      for (index_t o = 0; o < f.out; ++o)
        for (index_t k = 0; k < r; ++k) {
          y[n * f.out + o] += s * u[k] * b[o * r + k];
          db[o * r + k] += s * f.dy[n * f.out + o] * u[k];
          du[k] += s * f.dy[n * f.out + o] * b[o * r + k];
        }
      for (index_t k = 0; k < r; ++k)
        for (index_t i = 0; i < f.in; ++i) {
          da[k * f.in + i] += du[k] * f.x[n * f.in + i];
          dx[n * f.in + i] += du[k] * a[k * f.in + i];
        }
    }
  }
};

/// The first element where got and ref differ by more than tol * (|ref| + 1) (test::check_close's measure), or "":
/// every quantity and both splits report, where check_close would stop the test at the first.
std::string mismatch(const std::vector<double>& got, const std::vector<double>& ref, double tol) {
  if (got.size() != ref.size()) return std::to_string(got.size()) + " values, reference " + std::to_string(ref.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(got[i] - ref[i]) <= tol * (std::abs(ref[i]) + 1.0)))
      return "element " + std::to_string(i) + " is " + std::to_string(got[i]) + ", reference " + std::to_string(ref[i]);
  return "";
}

struct adapter_result {
  std::vector<double> y, da, db, dx;
  std::string error;
};

/// One rank of a LoRA-adapted linear layer (base frozen, as LoRA trains it): its shard of W, b, A and B.
adapter_result run_adapter_rank(thread_group_policy& group, split how, const full_layer& f, const full_adapter& fa) {
  using adapted = nn::lora_linear<precision::fp32, thread_group_policy, host>;
  adapter_result res;
  const shard s{how, 1, f.in, f.out, group.rank};
  const index_t li = s.local_in(), lo = s.local_out(), n = f.n, r = fa.rank;
  nn::param_store<float, host> store;
  adapted lin(group, {{"dense"}, f.in, f.out, parallel::unit::layer(0), how}, 1, 4);
  lin.register_params(store);
  lin.add_adapters(store, {.r = static_cast<int>(r), .alpha = fa.scale * static_cast<double>(r)}, {true},
                   parallel::unit::adapter(0));
  store.allocate();
  store.set_trainable("dense.weight", false);
  store.set_trainable("dense.bias", false);
  lin.bind(store);
  fill(store.get("dense.weight"), f.w, [&](index_t j, index_t k) { return s.full_out(j) * f.in + s.full_in(k); });
  fill(store.get("dense.bias"), f.b, [&](index_t j, index_t) { return s.full_out(j); });
  // A [r, in] is divided with the input features (row split), B [out, r] with the output features (column split).
  fill(store.get("dense.lora_A.weight"), fa.a, [&](index_t k, index_t i) { return k * f.in + s.full_in(i); });
  fill(store.get("dense.lora_B.weight"), fa.b, [&](index_t o, index_t k) { return s.full_out(o) * r + k; });
  const tensor<float, host> x({n, li}), y({n, lo}), dy({n, lo}), dx({n, li});
  fill(x, f.x, [&](index_t i, index_t k) { return i * f.in + s.full_in(k); });
  fill(dy, f.dy, [&](index_t i, index_t o) { return i * f.out + s.full_out(o); });
  typename adapted::saved u;
  u[0] = tensor<float, host>({n, r});
  nn::lora_scratch<float, host> scratch{{}, {}, tensor<float, host>({n, r})};
  const nn::pass p{.training = true};
  lin.forward(x, y, gemm_epilogue::bias, u, scratch, p);
  store.allocate_grads();
  lin.bind_grads(store);
  nn::ones_vector<float, host> ones;
  lin.backward(dy, x, dx, grad_mode::overwrite, grad_mode::overwrite, u, scratch, p, ones);
  res.y = test::values(y);
  res.dx = test::values(dx);
  res.da = test::values(store.grad("dense.lora_A.weight"));
  res.db = test::values(store.grad("dense.lora_B.weight"));
  return res;
}

/// Runs the adapted layer split `how` on a group of two threads and checks every rank's y, dB, dA and dx against
/// the whole layer's fp64 references (each check reports, so one run shows every quantity that is wrong).
void check_adapter_group(split how) {
  constexpr index_t n = 5, r = 3;
  const full_layer f(n, 8, 6, 700);
  const full_adapter fa(f, r, 1.5, 800);
  thread_group g(ranks);
  std::array<adapter_result, ranks> out;
  std::vector<std::thread> threads;
  for (int k = 0; k < ranks; ++k)
    threads.emplace_back([&, k] {
      try {
        thread_group_policy p{&g, k};
        out[k] = run_adapter_rank(p, how, f, fa);
      } catch (const std::exception& e) {
        out[k].error = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int k = 0; k < ranks; ++k) {
    INFO("rank " << k);
    REQUIRE(out[k].error == "");
    const shard s{how, 1, f.in, f.out, k};
    const index_t li = s.local_in(), lo = s.local_out();
    std::vector<double> y(n * lo), dx(n * li), da(r * li), db(lo * r);
    for (index_t i = 0; i < n; ++i) {
      for (index_t o = 0; o < lo; ++o) y[i * lo + o] = fa.y[i * f.out + s.full_out(o)];
      for (index_t c = 0; c < li; ++c) dx[i * li + c] = fa.dx[i * f.in + s.full_in(c)];
    }
    for (index_t j = 0; j < r; ++j) {
      for (index_t c = 0; c < li; ++c) da[j * li + c] = fa.da[j * f.in + s.full_in(c)];
      for (index_t o = 0; o < lo; ++o) db[o * r + j] = fa.db[s.full_out(o) * r + j];
    }
    CHECK(mismatch(out[k].y, y, 1e-5) == "");    // y
    CHECK(mismatch(out[k].db, db, 1e-5) == "");  // dB
    CHECK(mismatch(out[k].da, da, 1e-5) == "");  // dA
    CHECK(mismatch(out[k].dx, dx, 1e-5) == "");  // dx
  }
}

}  // namespace

TEST_CASE("lora_linear on a group of two, unsplit: the references and shard maps of the split case hold",
          "[nn][linear][parallel][lora]") {
  check_adapter_group(split::none);
}

// The adapter's own collective: row split, u = x_local A_local^T is a partial sum (reduced before B); column split,
// d(x A^T) = s dy_local B_local is (reduced before dA and the adapter's share of dx).
TEST_CASE("tensor-parallel lora_linear: each rank's adapter shard computes its part of the whole adapted layer",
          "[nn][linear][parallel][lora]") {
  for (const split how : {split::column, split::row}) {
    INFO((how == split::column ? "column split" : "row split"));
    check_adapter_group(how);
  }
}
