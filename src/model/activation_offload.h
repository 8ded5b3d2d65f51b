// activation_offload.h — ActivationOffload: moves each block's kept activations (its saved unit: the block
// input x_l and what the recompute policy keeps beside it; the last unit is the final norm's input x_L alone)
// between a small ring of device slots and host memory, so a training model holds a few units on the device
// instead of one per block. The model calls it at fixed points of forward and backward (a unit goes to the
// host in parts, each as soon as the block's forward has made it); the copies run on a stream of their own,
// ordered against the model's stream with events, so they overlap the blocks' compute. See Note [Activation
// offloading] in model/transformer.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/pinned_memory.h"
#include "core/stream.h"

namespace ft {

class ActivationOffload {
 public:
  // Of `units` going through a ring of `ring` slots, units 0 .. host_units(units, ring) - 1 go to the host; the
  // last `ring` stay in their slots from the forward to their backward.
  static std::int64_t host_units(std::int64_t units, std::int64_t ring) { return units > ring ? units - ring : 0; }

  ActivationOffload() = default;  // off: every call does nothing
  // units: the model's blocks + 1; slots: the device addresses of the ring's slots, unit_bytes each (unit u
  // lives in slot u % size); compute: the model's stream. Allocates host_units x unit_bytes of pinned host
  // memory (ft::Error naming the bytes when the host cannot give them) and, on a CUDA device, the copy stream
  // and events.
  ActivationOffload(std::int64_t units, std::vector<char*> slots, std::size_t unit_bytes, Device device,
                    const Stream& compute);
  ActivationOffload(ActivationOffload&&) noexcept = default;
  ActivationOffload& operator=(ActivationOffload&&) noexcept = default;

  std::size_t host_bytes() const { return host_.bytes(); }

  // Forward. Before the model writes into unit u's slot (the embedding: u = 0; block l: u = l + 1, its output
  // x_{l+1}; block l's own tensors go to slot l, made writable before block l - 1): the model's stream waits
  // until the slot's previous unit is on the host.
  void make_writable(std::int64_t unit);
  // During block l's forward, once the first `bytes` of its unit are final (the model enqueued their last
  // write): those of them not yet copied go to the host, after the model's stream's work so far (for
  // l < host_units). The parts of a unit are stored in order of their ends.
  void store_part(std::int64_t l, std::size_t bytes);
  // After block l's forward is enqueued: the rest of its unit is copied to the host (for l < host_units).
  void store(std::int64_t l);
  // Backward. Before block l's backward reads its unit: the model's stream waits for its copy back (for
  // l < host_units; the others never left their slots).
  void make_readable(std::int64_t l);
  // After unit u's last reader in backward is enqueued (the final norm's for x_L, block l's for unit l): its
  // slot is free, and unit u - ring (whose slot it is) is copied back into it, ring - 1 blocks ahead of use.
  void release(std::int64_t u);
  // At the end of backward: the model's stream waits for every copy issued this step (so the next step may
  // overwrite any slot, and a captured CUDA graph joins the copy stream).
  void finish();

 private:
  char* host_unit(std::int64_t l) const { return static_cast<char*>(host_.data()) + unit_bytes_ * static_cast<std::size_t>(l); }
  std::size_t slot_of(std::int64_t l) const { return static_cast<std::size_t>(l) % slots_.size(); }
  // dst <- src (bytes) on the copy stream after the model's stream's work so far; `done` recorded after.
  void copy_after_compute(char* dst, const char* src, std::size_t bytes, Event* done);

  std::int64_t units_ = 0;
  std::vector<char*> slots_;
  std::size_t unit_bytes_ = 0;
  Device device_ = Device::cpu();
  Stream compute_;
  Stream copy_;                                 // CUDA: the copies' stream
  PinnedBuffer host_;                           // (host_units, unit_bytes)
  std::vector<std::unique_ptr<Event>> stored_;  // CUDA, per slot: its unit's copy to the host is done
  std::vector<std::unique_ptr<Event>> loaded_;  // CUDA, per slot: its unit's copy back is done
  std::vector<bool> storing_;                   // per slot: a copy to the host was issued and not waited for
  std::vector<std::size_t> stored_bytes_;       // per slot: bytes of its unit copied to the host so far
  std::unique_ptr<Event> computed_;             // CUDA: the model's stream's work so far, for the copy stream
  std::unique_ptr<Event> copied_;               // CUDA: the copy stream's work so far, for finish()
  bool copies_issued_ = false;                  // since the last finish()
};

}  // namespace ft
