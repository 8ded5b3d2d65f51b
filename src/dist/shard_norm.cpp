// shard_norm.cpp — the global norm of sharded gradients: partial sums gathered as (hi, lo) pairs.
#include "dist/shard_norm.h"

#include <cmath>
#include <vector>

#include "core/buffer.h"
#include "core/tensor_io.h"
#include "ops/cast.h"

namespace ft {

double global_norm(Communicator& comm, double local_sum_squares, const Device& device, const Stream& stream) {
  const int world = comm.world_size();
  const auto hi = static_cast<float>(local_sum_squares);
  const OwnedTensor sums({2 * world}, DType::f32, device, "shard norm partial sums", stream);  // (2 world)
  const Tensor mine = sums->narrow(0, 2 * comm.rank(), 2);  // (2) this rank's hi, lo
  fill(mine.narrow(0, 0, 1), hi, stream);
  fill(mine.narrow(0, 1, 1), local_sum_squares - static_cast<double>(hi), stream);
  comm.all_gather(sums, mine)->wait();
  double total = 0;
  const std::vector<double> gathered = read_as_double(sums);
  for (int r = 0; r < world; ++r) total += gathered[2 * r] + gathered[2 * r + 1];
  return std::sqrt(total);
}

}  // namespace ft
