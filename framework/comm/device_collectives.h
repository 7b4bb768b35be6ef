// The seam between a process group's front end and the backend that moves a device's
// tensors (NCCL for CUDA: nccl_backend.h). The front end (mpi_process_group.cpp) checks,
// numbers, records and watches every call; a backend only launches it. A CPU-only build has
// no such backend, and a CUDA tensor there is one clear error.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/process_group.h"

namespace dpt::dist {

class DeviceCollectives {
 public:
  virtual ~DeviceCollectives() = default;

  virtual int device() const = 0;  // the device index its tensors are on
  // Whether the next call is recorded into a CUDA graph being captured: its Work then
  // completes in each replay, never to the host, and must not be watched.
  virtual bool capturing() const = 0;
  // Ends every call in flight, including ones blocked on a rank that is gone; the backend
  // is unusable afterwards. Callable from any thread (the watchdog's).
  virtual void abort() = 0;
  // Collective over this backend's ranks: ranks with equal colour >= 0 form a new one,
  // ordered by (key, rank); colour < 0 returns nullptr. `name`: the new group's.
  virtual std::shared_ptr<DeviceCollectives> split(int color, int key, std::string name) = 0;

  // As ProcessGroup's, with arguments the front end has checked; each returns at once.
  // is_completed() of the Works they return may be called from any thread and throws the
  // backend's asynchronous error.
  virtual WorkPtr all_reduce(const Tensor& t, ReduceOp op) = 0;
  virtual WorkPtr broadcast(const Tensor& t, int root) = 0;
  virtual WorkPtr all_gather(const Tensor& out, const Tensor& in) = 0;
  virtual WorkPtr reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op) = 0;
  virtual WorkPtr reduce(const Tensor& t, int root, ReduceOp op) = 0;
  virtual WorkPtr gather(const Tensor& out, const Tensor& in, int root) = 0;
  virtual WorkPtr scatter(const Tensor& out, const Tensor& in, int root) = 0;
  virtual WorkPtr all_to_all(const Tensor& out, const Tensor& in, const AllToAllLayout& layout) = 0;
  // Every message started together (one NCCL group): one Work for all of them.
  virtual WorkPtr send_recv(const std::vector<P2POp>& ops) = 0;
};

// Makes the backend of a group's CUDA tensors: collective over `bootstrap` (an MPI
// communicator of the group's ranks that no collective uses). nccl_backend.cpp registers it
// when the library loads (CUDA builds); null: none registered.
using DeviceCollectivesMaker = std::shared_ptr<DeviceCollectives> (*)(MPI_Comm bootstrap, const std::string& name,
                                                                      int device);
void register_cuda_collectives(DeviceCollectivesMaker maker);
DeviceCollectivesMaker cuda_collectives_maker();

}  // namespace dpt::dist
