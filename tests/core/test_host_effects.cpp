// graph::host_effect: the rule that keeps host counters right under CUDA-graph
// replay (issue 12), checked without a GPU: outside a recording an effect runs
// at once; inside one it is recorded, in order, and each replay repeats it.
#include <doctest/doctest.h>

#include <string>
#include <thread>

#include <fusor/graph/host_effects.hpp>

using namespace fusor;

TEST_CASE("host effects: run at once outside a recording") {
  int counter = 0;
  graph::host_effect([&] { ++counter; });
  CHECK(counter == 1);
  CHECK_FALSE(graph::recording_host_effects_now());
}

TEST_CASE("host effects: recorded while recording, repeated in order by each replay") {
  std::string log;
  graph::host_effect_record record;
  {
    graph::recording_host_effects recording(record);
    CHECK(graph::recording_host_effects_now());
    graph::host_effect([&] { log += 'a'; });
    graph::host_effect([&] { log += 'b'; });
  }
  CHECK(log.empty());  // recorded, not run
  CHECK(record.size() == 2);
  CHECK_FALSE(graph::recording_host_effects_now());
  record.replay();
  record.replay();
  CHECK(log == "abab");
  graph::host_effect([&] { log += 'c'; });  // the recording has ended: at once
  CHECK(log == "ababc");
}

TEST_CASE("host effects: a recording belongs to its thread, and nested recordings restore the outer one") {
  int here = 0, there = 0;
  graph::host_effect_record outer, inner;
  {
    graph::recording_host_effects recording(outer);
    std::thread other([&] { graph::host_effect([&] { ++there; }); });  // a loader thread, say
    other.join();
    CHECK(there == 1);
    {
      graph::recording_host_effects nested(inner);
      graph::host_effect([&] { here += 10; });
    }
    graph::host_effect([&] { here += 1; });
  }
  CHECK(outer.size() == 1);
  CHECK(inner.size() == 1);
  outer.replay();
  CHECK(here == 1);
  inner.replay();
  CHECK(here == 11);
}
