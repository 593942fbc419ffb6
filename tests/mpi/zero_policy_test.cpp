// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// parallel::zero<Stage, Offload> as a model's Parallel argument: the tag resolves to zero_data_parallel, whose stage is
// the type's whatever the options say, and a ZeRO-3 BERT named by the tag trains a step computing what a
// single-process model does. An MPI test because the policy holds communicators; run alone (a world of one) and
// under mpirun (CTest: zero_policy_singleton, zero_policy_np2).
#include "mpi_catch_listener.hpp"  // first: it configures Catch2 v2 before catch.hpp

#include <cmath>
#include <cstdint>
#include <type_traits>

#include <loom/loom.hpp>
#include <loom/models/bert/model.hpp>
#include <loom/models/bert/sentence_encoder.hpp>
#include <loom/models/bert/weights.hpp>
#include <loom/parallel/data_parallel.hpp>
#include <loom/parallel/mpi_world.hpp>
#include <loom/parallel/tensor_parallel.hpp>
#include <loom/parallel/zero.hpp>

#include "catch.hpp"

using namespace loom;
using parallel::offload;
using parallel::zero;
using parallel::zero_data_parallel;

// The type front, at compile time.
static_assert(parallel::policy_tag<zero<2>> && !parallel::policy_tag<parallel::single>);
static_assert(std::is_same_v<parallel::resolve_policy_t<parallel::single, float, host>, parallel::single>);
static_assert(std::is_same_v<parallel::resolve_policy_t<parallel::data_parallel<float, host>, float, host>,
                             parallel::data_parallel<float, host>>);
static_assert(std::is_same_v<bert::model<precision::fp32, zero<2>, host>::parallel_type,
                             zero_data_parallel<float, host, 2, offload::none>>);
static_assert(std::is_same_v<bert::model<precision::bf16_mixed, zero<3, offload::params>, host>::parallel_type,
                             zero_data_parallel<bf16, host, 3, offload::params>>);
static_assert(std::is_same_v<bert::sentence_encoder<precision::fp32, zero<1>, host>::parallel_type,
                             zero_data_parallel<float, host, 1, offload::none>>);
static_assert(std::is_same_v<bert::model<precision::fp32, parallel::single, host>::parallel_type, parallel::single>);
static_assert(parallel::policy<zero_data_parallel<float, host, 2, offload::none>>);
static_assert(zero_data_parallel<float, host, 3, offload::params>::zero_stage == 3 &&
              zero_data_parallel<float, host, 3, offload::params>::zero_offload == offload::params);

// tensor_parallel<N, Replicas>: the group size and what the replicas run, fixed by the type.
static_assert(std::is_same_v<bert::model<precision::fp32, parallel::tensor_parallel<2>, host>::parallel_type,
                             parallel::fixed_data_parallel<float, host, 2, 0, offload::none>>);
static_assert(std::is_same_v<
              bert::model<precision::bf16_mixed, parallel::tensor_parallel<2, zero<1>>, host>::parallel_type,
              parallel::fixed_data_parallel<bf16, host, 2, 1, offload::none>>);
static_assert(parallel::policy<parallel::fixed_data_parallel<float, host, 2, 1, offload::none>>);

namespace {

bert::config tiny_config() {
  bert::config c;
  c.vocab_size = 64;
  c.hidden_size = 32;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.intermediate_size = 64;
  c.max_position_embeddings = 16;
  c.type_vocab_size = 2;
  c.set_labels({"a", "b", "c"});
  return c;
}

/// The same four rows on every rank.
bert::batch<host> tiny_batch(const bert::config& c) {
  tensor<std::int32_t> ids({4, 8}), types({4, 8}), lengths({4}), labels({4});
  for (index_t i = 0; i < ids.numel(); ++i) {
    ids.data()[i] = static_cast<std::int32_t>((i * 37 + 5) % c.vocab_size);
    types.data()[i] = static_cast<std::int32_t>(i % 2);
  }
  for (index_t r = 0; r < 4; ++r) {
    lengths(r) = static_cast<std::int32_t>(8 - 2 * r);
    labels(r) = static_cast<std::int32_t>(r % c.num_labels());
  }
  return {ids, types, lengths, labels};
}

float host_loss(const tensor<float, host>& loss) { return loss.data()[0]; }

}  // namespace

TEST_CASE("zero<Stage>: the policy's stage is the type's, whatever the options say", "[zero]") {
  parallel::data_parallel_options o;
  o.stage = 3;  // replaced by the type's stage
  zero<1>::policy<float, host> one(parallel::mpi_communicator{}, parallel::mpi_communicator{}, o);
  CHECK(one.active());
  CHECK(one.stage() == 1);
  zero_data_parallel<float, host, 2, offload::none> two(parallel::mpi_communicator{}, parallel::mpi_communicator{});
  CHECK(two.stage() == 2);
  CHECK(two.size() == parallel::world().size());
  CHECK(two.shard_ranks() == parallel::world().size());
  // Default-constructed: inactive, as data_parallel is.
  const zero<3>::policy<float, host> idle;
  CHECK_FALSE(idle.active());
  CHECK(idle.stage() == 0);
  loom::test::agree_on_failures();
}

TEST_CASE("bert::model<fp32, zero<3>, host> trains a step as the single-process model does", "[zero][bert]") {
  const bert::config cfg = tiny_config();
  const bert::batch<host> b = tiny_batch(cfg);

  bert::model<precision::fp32, parallel::single, host> ref(cfg);
  bert::init_weights(ref, 7);
  ref.forward_loss(b, bert::mode::training, 3, 0);

  using zero3_model = bert::model<precision::fp32, zero<3>, host>;
  zero3_model m(cfg, true, {parallel::mpi_communicator{}, parallel::mpi_communicator{}});
  bert::init_weights(m, 7);
  REQUIRE(m.parallel().stage() == 3);
  m.parallel().attach(m.params());  // ZeRO-3: this rank keeps its shards, the units are gathered per use
  CHECK(m.parallel().packed_params().numel() == m.parallel().shards().local_size());
  m.forward_loss(b, bert::mode::training, 3, 0);
  const float want = host_loss(ref.loss()), got = host_loss(m.loss());
  INFO("single " << want << ", zero<3> " << got);
  CHECK(std::isfinite(got));
  CHECK(std::abs(got - want) <= 1e-6f * std::abs(want));

  m.parallel().set_sync(true);
  m.backward(b);
  m.parallel().finish_gradients();
  const tensor<float, host>& g = m.parallel().packed_grads();
  REQUIRE(g.numel() == m.parallel().shards().local_size());
  double norm = 0;
  for (index_t i = 0; i < g.numel(); ++i) norm += double(g.data()[i]) * g.data()[i];
  CHECK(std::isfinite(norm));
  CHECK(norm > 0);
  loom::test::agree_on_failures();
}

TEST_CASE("tensor_parallel<N, zero<1>>: groups of N over the world, ZeRO-1 over their replicas", "[zero][tp]") {
  const int world = parallel::world().size();
  parallel::tensor_parallel<1, zero<1>>::policy<float, host> one(parallel::mpi_communicator{},
                                                                 parallel::mpi_communicator{});
  CHECK(one.tensor_size() == 1);
  CHECK(one.has_tensor_group());  // a group of one takes the split code path (its sums are skipped)
  CHECK(one.size() == world);   // every rank is its own group: the replicas are the world
  CHECK(one.stage() == 1);
  if (world % 2 == 0) {
    parallel::tensor_parallel<2>::policy<float, host> two(parallel::mpi_communicator{}, parallel::mpi_communicator{});
    CHECK(two.tensor_size() == 2);
    CHECK(two.tensor_rank() == parallel::world().rank() % 2);
    CHECK(two.size() == world / 2);
    CHECK(two.world_rank() == parallel::world().rank());
    // The group's sum: every rank adds its world rank + 1.
    tensor<float, host> t({3});
    t = static_cast<float>(parallel::world().rank() + 1);
    two.all_reduce_sum(t);
    const int first = parallel::world().rank() / 2 * 2;
    CHECK(t.data()[2] == static_cast<float>((first + 1) + (first + 2)));
  }
  loom::test::agree_on_failures();
}
