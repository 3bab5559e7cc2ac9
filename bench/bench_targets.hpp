// bench/bench_targets.hpp — issue 12's performance targets, checked where they
// are measured. A benchmark reports each measured ratio against its target
// (fusor over the peer timed in the same run, higher is better); the worst
// ratio per target and its verdict are printed as a last table, which
// scripts/gpu_check.sh copies into its report. A missed target is a finding,
// not a failure: the exit status stays the benchmark's correctness verdict.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace fusor_bench {

class targets {
 public:
  // `what` names the target (the same name gathers its cases), `required` the
  // smallest acceptable ratio, `ratio` the one measured for `case_name`.
  void observe(const std::string& what, double required, double ratio, const std::string& case_name) {
    for (entry& e : entries_)
      if (e.what == what) {
        if (ratio < e.worst) e.worst = ratio, e.worst_case = case_name;
        ++e.cases;
        return;
      }
    entries_.push_back({what, required, ratio, case_name, 1});
  }
  void print() const {
    if (entries_.empty()) return;
    std::printf("\n| target (issue 12) | required | worst measured | in | cases | verdict |\n|---|---:|---:|---|---:|---|\n");
    for (const entry& e : entries_)
      std::printf("| %s | >= %.2fx | %.3fx | %s | %d | %s |\n", e.what.c_str(), e.required, e.worst, e.worst_case.c_str(),
                  e.cases, e.worst >= e.required ? "met" : "MISSED");
  }

 private:
  struct entry {
    std::string what;
    double required, worst;
    std::string worst_case;
    int cases;
  };
  std::vector<entry> entries_;
};

}  // namespace fusor_bench
