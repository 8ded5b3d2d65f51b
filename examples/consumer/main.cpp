// main.cpp — a program built against the installed flashtrain: trains the tiny Transformer LM for a few
// steps on the CPU through the training library (train/train_run.h), printing its log. Exit status 0 when
// every step ran and the losses are finite.
#include <cmath>
#include <cstdint>
#include <iostream>

#include "core/device.h"
#include "core/error.h"
#include "core/version.h"
#include "model/config.h"
#include "train/train_run.h"

int main() {
  ft::TrainPlan plan;
  plan.model = ft::model_config("tiny");
  plan.model.context_length = 16;
  plan.precision = ft::Precision::fp32;
  plan.device = ft::Device::cpu();
  plan.batch = 4;
  plan.steps = 5;
  plan.log_interval = 1;
  plan.adamw.lr = 3e-3;
  plan.schedule = ft::CosineSchedule{.max_lr = 3e-3, .min_lr = 3e-4, .warmup_iters = 1, .cycle_iters = plan.steps};
  std::cout << "flashtrain " << ft::version() << " (" << ft::git_commit() << ")\n";
  try {
    const ft::TrainResult result = ft::run_training(plan, std::cout);
    bool finite = true;
    for (double loss : result.losses) finite = finite && std::isfinite(loss);
    return static_cast<std::int64_t>(result.losses.size()) == plan.steps && finite ? 0 : 1;
  } catch (const ft::Error& e) {
    std::cerr << "consumer: " << e.what() << "\n";
    return 1;
  }
}
