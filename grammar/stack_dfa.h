// grammar/stack_dfa.h
//
// Runs a Pda over bytes. A parse state is a set of stacks; stacks are
// hash-consed frames (node, parent) in a StackArena, so equal stacks share one
// id and a state is a sorted vector of frames. StackDfa interns states and
// memoizes byte transitions, i.e. it is a lazily built DFA over the PDA's
// configurations: a byte already seen from a state costs one table lookup.
//
// Thread safety: not thread-safe; one StackDfa per matcher or per walk.

#ifndef WEIR_GRAMMAR_STACK_DFA_H_
#define WEIR_GRAMMAR_STACK_DFA_H_

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "grammar/pda.h"

namespace weir::grammar {

using StackId = int32_t;
// Parent of the root rule's frames: popping to it means the grammar can end.
inline constexpr StackId kRootStack = 0;
// Parent standing for an unknown caller (per-node token cache walks).
inline constexpr StackId kBoundaryStack = 1;

// One stack: the current position `node` on top of the interned stack `parent`.
struct Frame {
  int32_t node;
  StackId parent;
  friend bool operator==(const Frame& a, const Frame& b) {
    return a.node == b.node && a.parent == b.parent;
  }
  friend bool operator<(const Frame& a, const Frame& b) {
    return a.node != b.node ? a.node < b.node : a.parent < b.parent;
  }
  template <typename H>
  friend H AbslHashValue(H h, const Frame& f) {
    return H::combine(std::move(h), f.node, f.parent);
  }
};

// A set of stacks, sorted and unique. Empty means "rejected".
using FrameSet = std::vector<Frame>;

class StackDfa {
 public:
  using StateId = int32_t;
  static constexpr StateId kDead = -1;

  // Does not take ownership; `pda` must outlive this.
  explicit StackDfa(const Pda& pda);
  // Copies the stack arena (so copied FrameSets stay meaningful) but not the memo.
  StackDfa(const StackDfa& other);
  StackDfa& operator=(const StackDfa&) = delete;

  // Returns the id of the state whose stacks are `frames` (sorted, unique).
  StateId Intern(const FrameSet& frames);
  // Returns the state reached by consuming `byte`, or kDead.
  StateId Next(StateId state, uint8_t byte);

  const FrameSet& Frames(StateId s) const { return states_[s].frames; }
  // The frames that consume the next byte once calls and returns are
  // expanded (sorted); every path out of `s` starts at one of them.
  const FrameSet& Ready(StateId s) const { return states_[s].ready; }
  // True if some stack of `s` can pop past the root: the input may end here.
  bool CanFinish(StateId s) const { return states_[s].can_finish; }
  // True if some stack of `s` can pop into kBoundaryStack.
  bool HitsBoundary(StateId s) const { return states_[s].hits_boundary; }
  // The bytes b with Next(s, b) == s (computed once per state).
  const ByteSet& SelfLoops(StateId s);
  // Equivalent to SelfLoops(s).any(), without scanning the set.
  bool HasSelfLoops(StateId s) {
    SelfLoops(s);
    return states_[s].has_self_loops;
  }
  // True if no byte can follow in `s`.
  bool AtEnd(StateId s) const { return states_[s].ready.empty(); }

  // Drops memoized states once more than `max_states` exist (the arena and
  // FrameSets handed out stay valid). REQUIRES: no StateId is held across it.
  void TrimMemo(int32_t max_states);
  int64_t MemoryBytes() const;

 private:
  struct State {
    FrameSet frames;
    FrameSet ready;  // closure frames whose node has byte edges
    bool can_finish = false;
    bool hits_boundary = false;
    bool self_loops_known = false;
    bool has_self_loops = false;
    ByteSet self_loops;
    std::unique_ptr<std::array<StateId, 256>> next;  // -2 = not computed
  };

  StackId InternStack(int32_t node, StackId parent);
  // The frames reached from `ready` by `byte`, sorted and unique.
  void Successors(const FrameSet& ready, uint8_t byte, FrameSet* out) const;
  void Close(State& state);

  const Pda& pda_;
  std::vector<Frame> stacks_;  // StackId -> frame; ids 0 and 1 are sentinels
  absl::flat_hash_map<Frame, StackId> stack_ids_;
  std::vector<State> states_;
  absl::flat_hash_map<FrameSet, StateId> state_ids_;
  std::vector<Frame> work_;  // scratch for Close
};

}  // namespace weir::grammar

#endif  // WEIR_GRAMMAR_STACK_DFA_H_
