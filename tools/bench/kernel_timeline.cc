// tools/bench/kernel_timeline.cc — SummarizeTimeline and ShortKernelName
// (pure; the CUPTI recording is kernel_timeline_cupti.cc).

#include "tools/bench/kernel_timeline.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace weir::bench {

std::string ShortKernelName(const std::string& name) {
  std::string s = name;
  int status = -1;
  char* demangled = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
  if (status == 0 && demangled != nullptr) s = demangled;
  std::free(demangled);
  if (s.rfind("void ", 0) == 0) s = s.substr(5);
  // Cut at the parameter list and drop the qualifiers, both outside template
  // arguments.
  int depth = 0;
  size_t last_scope = std::string::npos;
  for (size_t i = 0; i < s.size(); ++i) {
    const char ch = s[i];
    if (ch == '<') ++depth;
    if (ch == '>' && depth > 0) --depth;
    if (depth != 0) continue;
    if (ch == '(') {
      s.resize(i);
      break;
    }
    if (ch == ':' && i + 1 < s.size() && s[i + 1] == ':') last_scope = i + 1;
  }
  if (last_scope != std::string::npos && last_scope + 1 < s.size()) s = s.substr(last_scope + 1);
  return s;
}

TimelineSummary SummarizeTimeline(std::vector<KernelRecord> records, size_t top_gaps) {
  TimelineSummary out;
  // Zero-length or inverted records say nothing about time; keep them counted.
  out.kernels = static_cast<int64_t>(records.size());
  if (records.empty()) return out;
  std::sort(records.begin(), records.end(), [](const KernelRecord& a, const KernelRecord& b) {
    return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns < b.end_ns;
  });
  std::vector<std::string> names(records.size());
  std::map<std::string, TimelineShare> shares;
  std::map<std::string, std::string> short_names;
  uint64_t first = records.front().start_ns, last = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    KernelRecord& r = records[i];
    if (r.end_ns < r.start_ns) r.end_ns = r.start_ns;
    auto [short_name, fresh] = short_names.try_emplace(r.name);  // a name demangled once
    if (fresh) short_name->second = ShortKernelName(r.name);
    names[i] = short_name->second;
    TimelineShare& s = shares[names[i]];
    s.name = names[i];
    ++s.count;
    s.busy_us += static_cast<double>(r.end_ns - r.start_ns) * 1e-3;
    last = std::max(last, r.end_ns);
  }
  out.span_us = static_cast<double>(last - first) * 1e-3;
  // The first kernel of each launch (records are in start order): idle time
  // that ends there is the host's.
  std::vector<bool> opens_launch(records.size(), false);
  {
    std::set<uint32_t> seen;
    for (size_t i = 0; i < records.size(); ++i) {
      opens_launch[i] = seen.insert(records[i].launch).second;
    }
    out.launches = static_cast<int64_t>(seen.size());
  }

  // Sweep: at every start or end the set of running kernels changes; the
  // interval up to the next boundary is shared by the running ones.
  struct Event {
    uint64_t at;
    bool start;
    size_t record;
  };
  std::vector<Event> events;
  events.reserve(2 * records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    events.push_back({records[i].start_ns, true, i});
    events.push_back({records[i].end_ns, false, i});
  }
  std::sort(events.begin(), events.end(),
            [](const Event& a, const Event& b) { return a.at < b.at; });
  std::vector<size_t> running;
  for (size_t e = 0; e < events.size();) {
    const uint64_t at = events[e].at;
    for (; e < events.size() && events[e].at == at; ++e) {
      if (events[e].start) {
        running.push_back(events[e].record);
      } else {
        running.erase(std::find(running.begin(), running.end(), events[e].record));
      }
    }
    if (e == events.size()) break;
    const double dt = static_cast<double>(events[e].at - at) * 1e-3;
    if (running.empty()) {
      // The next boundary after an empty interval is a start.
      (opens_launch[events[e].record] ? out.host_us : out.idle_us) += dt;
    } else {
      for (size_t r : running) shares[names[r]].wall_us += dt / static_cast<double>(running.size());
    }
  }
  out.span_us -= out.host_us;
  for (auto& [name, share] : shares) out.shares.push_back(share);
  std::sort(out.shares.begin(), out.shares.end(),
            [](const TimelineShare& a, const TimelineShare& b) { return a.wall_us > b.wall_us; });

  // Idle gaps: a kernel starting after every earlier one has ended (not the
  // first of a launch: that gap is the host's).
  uint64_t reach = records.front().end_ns;
  size_t reach_record = 0;
  for (size_t i = 1; i < records.size(); ++i) {
    if (records[i].start_ns > reach && !opens_launch[i]) {
      out.gaps.push_back({.us = static_cast<double>(records[i].start_ns - reach) * 1e-3,
                          .before = names[reach_record],
                          .after = names[i]});
    }
    if (records[i].end_ns > reach) {
      reach = records[i].end_ns;
      reach_record = i;
    }
  }
  std::stable_sort(out.gaps.begin(), out.gaps.end(),
                   [](const TimelineGap& a, const TimelineGap& b) { return a.us > b.us; });
  if (out.gaps.size() > top_gaps) out.gaps.resize(top_gaps);
  return out;
}

}  // namespace weir::bench
