// backoff.h — how a rank waits for a collective to complete: poll at once for the first kSpins checks
// (a collective that is about to finish costs no sleep), then sleep between checks for intervals that
// double from kFirstSleep to kMaxSleep. A rank waiting for a slow, stopped or failed peer then uses
// almost no CPU instead of a whole core, and still sees completion within kMaxSleep. (MPI progresses a
// nonblocking collective inside MPI_Test; the kMaxSleep cap keeps that progress frequent.)
#pragma once

#include <algorithm>
#include <chrono>
#include <thread>

namespace ft {

class Backoff {
 public:
  static constexpr int kSpins = 200;
  static constexpr std::chrono::microseconds kFirstSleep{20};
  static constexpr std::chrono::microseconds kMaxSleep{1000};

  // Called after each check that found the work unfinished.
  void pause() {
    if (checks_++ < kSpins) {
      std::this_thread::yield();  // ranks may share cores (oversubscribed CI runs)
      return;
    }
    std::this_thread::sleep_for(sleep_);
    sleep_ = std::min(sleep_ * 2, kMaxSleep);
  }

 private:
  int checks_ = 0;
  std::chrono::microseconds sleep_ = kFirstSleep;
};

}  // namespace ft
