// activation_offload.cpp — the ring's copies and their ordering: events between the model's stream and the
// copy stream on CUDA, copies done at once on the CPU (the same calls, the same host buffer).
#include "model/activation_offload.h"

#include <utility>

#include "core/error.h"

namespace ft {

ActivationOffload::ActivationOffload(std::int64_t units, std::vector<char*> slots, std::size_t unit_bytes,
                                     Device device, const Stream& compute)
    : units_(units),
      slots_(std::move(slots)),
      unit_bytes_(unit_bytes),
      device_(device),
      compute_(compute),
      host_(unit_bytes * static_cast<std::size_t>(host_units(units, static_cast<std::int64_t>(slots_.size()))),
            device, "offloaded activations"),
      storing_(slots_.size(), false),
      stored_bytes_(slots_.size(), 0) {
  FT_CHECK(!slots_.empty(), "ActivationOffload: the ring needs at least one slot");
  if (device_.is_cpu()) return;
  copy_ = Stream::create(device_);
  for (std::size_t k = 0; k < slots_.size(); ++k) {
    stored_.push_back(std::make_unique<Event>(device_, false));
    loaded_.push_back(std::make_unique<Event>(device_, false));
  }
  computed_ = std::make_unique<Event>(device_, false);
  copied_ = std::make_unique<Event>(device_, false);
}

void ActivationOffload::copy_after_compute(char* dst, const char* src, std::size_t bytes, Event* done) {
  if (!device_.is_cpu()) {
    computed_->record(compute_);
    computed_->wait_on(copy_);
  }
  copy_bytes_async(dst, src, bytes, device_, copy_);
  if (done) done->record(copy_);
  copies_issued_ = true;
}

void ActivationOffload::make_writable(std::int64_t unit) {
  if (slots_.empty() || unit >= units_) return;
  const std::size_t k = slot_of(unit);
  if (!storing_[k]) return;
  if (!device_.is_cpu()) stored_[k]->wait_on(compute_);
  storing_[k] = false;
}

void ActivationOffload::store_part(std::int64_t l, std::size_t bytes) {
  if (slots_.empty() || l >= host_units(units_, static_cast<std::int64_t>(slots_.size()))) return;
  FT_CHECK(bytes <= unit_bytes_, "ActivationOffload: a part of ", bytes, " bytes exceeds the unit's ", unit_bytes_);
  const std::size_t k = slot_of(l), from = stored_bytes_[k];
  if (bytes <= from) return;
  copy_after_compute(host_unit(l) + from, slots_[k] + from, bytes - from,
                     device_.is_cpu() ? nullptr : stored_[k].get());
  stored_bytes_[k] = bytes;
  storing_[k] = true;
}

void ActivationOffload::store(std::int64_t l) {
  if (slots_.empty() || l >= host_units(units_, static_cast<std::int64_t>(slots_.size()))) return;
  store_part(l, unit_bytes_);
  stored_bytes_[slot_of(l)] = 0;  // the slot's next unit starts from its beginning
}

void ActivationOffload::make_readable(std::int64_t l) {
  if (slots_.empty() || l >= host_units(units_, static_cast<std::int64_t>(slots_.size()))) return;
  if (!device_.is_cpu()) loaded_[slot_of(l)]->wait_on(compute_);
}

void ActivationOffload::release(std::int64_t u) {
  const auto ring = static_cast<std::int64_t>(slots_.size());
  if (slots_.empty() || u < ring) return;
  const std::size_t k = slot_of(u);  // unit u - ring's slot too
  copy_after_compute(slots_[k], host_unit(u - ring), unit_bytes_, device_.is_cpu() ? nullptr : loaded_[k].get());
}

void ActivationOffload::finish() {
  if (!copies_issued_) return;
  if (!device_.is_cpu()) {
    copied_->record(copy_);
    copied_->wait_on(compute_);
  }
  storing_.assign(slots_.size(), false);
  stored_bytes_.assign(slots_.size(), 0);
  copies_issued_ = false;
}

}  // namespace ft
