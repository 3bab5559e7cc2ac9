// The pipeline's schedules and stage maps without MPI: every micro-batch is
// forwarded and backwarded exactly once per stage, in the order GPipe and 1F1B
// prescribe, within the contexts each stage holds; a simulation of the stages
// running their lists against each other (unit-time actions, a stage waiting
// for its neighbour's message) finishes without a deadlock in (m + p - 1)
// forward-backward slots, each stage idle for the bubble. Then the pipeline
// itself on one rank (comm::single): it trains exactly as optim::trainer does,
// reports, and refuses bad configurations at start.
#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include <fusor/comm/single.hpp>

#include "parallel/pipeline_checks.hpp"

using namespace pipeline_test;
using parallel::pipeline_action;
using parallel::pipeline_schedule;
using kind = pipeline_action::kind;

namespace {
constexpr pipeline_schedule schedules[] = {pipeline_schedule::gpipe, pipeline_schedule::one_forward_one_backward};

// The contexts in use while the actions run: a forward takes a free context, its
// backward frees it; returns the most in flight at once.
index_t check_contexts(const std::vector<pipeline_action>& actions, index_t contexts) {
  std::map<index_t, index_t> holder;  // context -> micro-batch
  index_t most = 0;
  for (const pipeline_action& a : actions) {
    INFO("micro-batch ", a.micro_batch, " in context ", a.context);
    CHECK(a.context >= 0);
    CHECK(a.context < contexts);
    if (a.what == kind::forward) {
      CHECK(holder.count(a.context) == 0);  // not holding another micro-batch
      holder[a.context] = a.micro_batch;
      most = std::max(most, index_t(holder.size()));
    } else {
      CHECK(holder.count(a.context) == 1);
      CHECK(holder[a.context] == a.micro_batch);
      holder.erase(a.context);
    }
  }
  CHECK(holder.empty());
  return most;
}
}  // namespace

TEST_CASE("pipeline schedule: each micro-batch forward then backward once per stage, in order, within its contexts") {
  for (pipeline_schedule schedule : schedules)
    for (int stages = 1; stages <= 5; ++stages)
      for (int stage = 0; stage < stages; ++stage)
        for (index_t m = 1; m <= 9; ++m) {
          INFO(parallel::name(schedule), " stage ", stage, " of ", stages, ", ", m, " micro-batches");
          const std::vector<pipeline_action> actions = parallel::pipeline_actions(schedule, stage, stages, m);
          CHECK(actions.size() == std::size_t(2 * m));
          std::vector<index_t> forwards, backwards;
          for (const pipeline_action& a : actions) {
            if (a.what == kind::forward) forwards.push_back(a.micro_batch);
            else {
              // Its forward came first.
              CHECK(std::find(forwards.begin(), forwards.end(), a.micro_batch) != forwards.end());
              backwards.push_back(a.micro_batch);
            }
          }
          std::vector<index_t> in_order(std::size_t(m), 0);
          for (index_t i = 0; i < m; ++i) in_order[std::size_t(i)] = i;
          CHECK(forwards == in_order);
          CHECK(backwards == in_order);

          const index_t contexts = parallel::pipeline_contexts(schedule, stage, stages, m);
          const index_t warm_up = std::min<index_t>(stages - stage - 1, m);
          if (schedule == pipeline_schedule::gpipe) {
            CHECK(contexts == m);
            for (index_t k = 0; k < 2 * m; ++k) CHECK((actions[std::size_t(k)].what == kind::forward) == (k < m));
          } else {
            CHECK(contexts == std::min<index_t>(m, stages - stage));
            // Warm-up forwards, then forward-backward pairs, then the remaining backwards.
            for (index_t k = 0; k < 2 * m; ++k) {
              const bool forward = actions[std::size_t(k)].what == kind::forward;
              if (k < warm_up) CHECK(forward);
              else if (k < warm_up + 2 * (m - warm_up)) CHECK(forward == ((k - warm_up) % 2 == 0));
              else CHECK(!forward);
            }
          }
          for (const pipeline_action& a : actions) CHECK(a.context == a.micro_batch % contexts);
          CHECK(check_contexts(actions, contexts) == contexts);  // all are used, none more
        }
}

TEST_CASE("pipeline schedule: 1F1B on stage 1 of 4 with 5 micro-batches, as Narayanan et al. draw it") {
  // Warm-up: 4 - 1 - 1 = 2 forwards; steady: F2 B0 F3 B1 F4 B2; cool-down: B3 B4.
  const std::vector<pipeline_action> want{
      {kind::forward, 0, 0},  {kind::forward, 1, 1},  {kind::forward, 2, 2},  {kind::backward, 0, 0},
      {kind::forward, 3, 0},  {kind::backward, 1, 1}, {kind::forward, 4, 1},  {kind::backward, 2, 2},
      {kind::backward, 3, 0}, {kind::backward, 4, 1}};
  CHECK(parallel::pipeline_actions(pipeline_schedule::one_forward_one_backward, 1, 4, 5) == want);
  CHECK(std::string(parallel::name(pipeline_schedule::gpipe)) == "GPipe");
  CHECK(std::string(parallel::name(pipeline_schedule::one_forward_one_backward)) == "1F1B");
}

TEST_CASE("pipeline schedule: the stages run against each other without a deadlock, idle for the bubble") {
  // Unit-time actions. F(s, i) needs F(s - 1, i) done (the activation), B(s, i)
  // needs B(s + 1, i) done (the gradient); a stage runs its list in order.
  for (pipeline_schedule schedule : schedules)
    for (int p = 1; p <= 5; ++p)
      for (index_t m = 1; m <= 9; ++m) {
        INFO(parallel::name(schedule), ", ", p, " stages, ", m, " micro-batches");
        std::vector<std::vector<pipeline_action>> lists;
        for (int s = 0; s < p; ++s) lists.push_back(parallel::pipeline_actions(schedule, s, p, m));
        std::map<std::tuple<int, int, index_t>, index_t> finished;  // (stage, kind, micro-batch) -> time
        std::vector<std::size_t> next(std::size_t(p), 0);
        std::vector<index_t> free_at(std::size_t(p), 0), busy(std::size_t(p), 0);
        for (bool progress = true; progress;) {
          progress = false;
          for (int s = 0; s < p; ++s) {
            if (next[std::size_t(s)] == lists[std::size_t(s)].size()) continue;
            const pipeline_action& a = lists[std::size_t(s)][next[std::size_t(s)]];
            const bool forward = a.what == kind::forward;
            const int from = forward ? s - 1 : s + 1;
            index_t ready = free_at[std::size_t(s)];
            if (from >= 0 && from < p) {
              const auto dependency = finished.find({from, int(a.what), a.micro_batch});
              if (dependency == finished.end()) continue;  // its message has not been sent yet
              ready = std::max(ready, dependency->second);
            }
            free_at[std::size_t(s)] = ready + 1;
            busy[std::size_t(s)] += 1;
            finished[{s, int(a.what), a.micro_batch}] = ready + 1;
            ++next[std::size_t(s)];
            progress = true;
          }
        }
        for (int s = 0; s < p; ++s) CHECK(next[std::size_t(s)] == lists[std::size_t(s)].size());  // no deadlock
        const index_t makespan = *std::max_element(free_at.begin(), free_at.end());
        CHECK(makespan == 2 * (m + p - 1));
        // Every stage computes 2m of the 2(m + p - 1) slots: idle 2(p - 1), the bubble.
        for (int s = 0; s < p; ++s) {
          CHECK(busy[std::size_t(s)] == 2 * m);
          CHECK(double(makespan - busy[std::size_t(s)]) / double(makespan) ==
                doctest::Approx(parallel::pipeline_bubble_share_of_step(p, m)));
          CHECK(double(makespan - busy[std::size_t(s)]) / double(busy[std::size_t(s)]) ==
                doctest::Approx(parallel::pipeline_bubble_fraction(p, m)));
        }
      }
}

TEST_CASE("pipeline schedule: message tags name the micro-batch and the direction") {
  std::set<int> tags;
  for (index_t i = 0; i <= parallel::pipeline_max_micro_batches; i += 97)
    for (kind k : {kind::forward, kind::backward}) {
      const int tag = parallel::pipeline_tag(i, k);
      CHECK(tag >= 0);
      CHECK(tag <= 32767);  // MPI's guaranteed tag range
      CHECK(tags.insert(tag).second);
    }
  CHECK(parallel::pipeline_tag(parallel::pipeline_max_micro_batches, kind::backward) <= 32767);
}

TEST_CASE("pipeline stage map: balanced runs cover every layer; bad maps name the numbers") {
  for (std::size_t layers = 1; layers <= 9; ++layers)
    for (int stages = 1; std::size_t(stages) <= layers; ++stages) {
      const std::vector<std::size_t> starts = parallel::balanced_stage_starts(layers, stages);
      parallel::check_stage_starts(starts, layers, stages);
      std::size_t covered = 0, shortest = layers, longest = 0;
      for (int s = 0; s < stages; ++s) {
        const nn::layer_range r = parallel::stage_layers(starts, s, layers);
        CHECK(r.first == covered);
        covered = r.last;
        shortest = std::min(shortest, r.last - r.first);
        longest = std::max(longest, r.last - r.first);
      }
      CHECK(covered == layers);
      CHECK(shortest >= 1);
      CHECK(longest - shortest <= 1);
    }
  expect_error<fusor::error>([] { parallel::check_stage_starts({0, 1, 2, 3, 4}, 4, 5); },
                             {"5 stages (ranks)", "network of 4 layers"});
  expect_error<fusor::error>([] { parallel::check_stage_starts({0, 2}, 4, 3); }, {"{0, 2}", "2 starts for 3 ranks"});
  expect_error<fusor::error>([] { parallel::check_stage_starts({1, 2}, 4, 2); }, {"start at layer 0, not 1"});
  expect_error<fusor::error>([] { parallel::check_stage_starts({0, 3, 2}, 4, 3); },
                             {"{0, 3, 2}", "must increase", "stage 2 starts at layer 2, stage 1 at 3"});
  expect_error<fusor::error>([] { parallel::check_stage_starts({0, 2, 2}, 4, 3); }, {"must increase"});
  expect_error<fusor::error>([] { parallel::check_stage_starts({0, 4}, 4, 2); },
                             {"stage 1 starts at layer 4", "has 4 layers"});
  expect_error<fusor::error>([] { (void)parallel::pipeline_actions(pipeline_schedule::gpipe, 2, 2, 4); },
                             {"stage 2 of 2"});
}

TEST_CASE("pipeline on one rank (comm::single): trains as optim::trainer does, for both schedules") {
  fusor::comm::single one;
  check_training_cases(one, executor{});
}

TEST_CASE("pipeline on one rank (comm::single): report") {
  fusor::comm::single one;
  check_report(one, executor{});
}

TEST_CASE("pipeline on one rank (comm::single): start-up errors") {
  fusor::comm::single one;
  check_startup_errors(one, executor{});
}
