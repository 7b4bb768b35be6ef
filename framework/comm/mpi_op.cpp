// MpiOp (mpi_op.h): the MPI backend's part of a call — starting it, progressing the paths
// that need no MPI request, and finishing it (avg's division, recv's count check) — and the
// call's text for messages.
#include "comm/mpi_op.h"

#include <cstring>
#include <numeric>
#include <sstream>

#include "comm/combine.h"
#include "comm/mpi_check.h"
#include "comm/shm_buffer.h"
#include "core/error.h"

namespace dpt::dist {
namespace {

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::i64:
      return MPI_INT64_T;
    case DType::bf16:
      return MPI_UINT16_T;  // moved, never reduced (check_tensor)
    default:
      return MPI_FLOAT;
  }
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return MPI_SUM;
    case ReduceOp::min:
      return MPI_MIN;
    case ReduceOp::max:
      return MPI_MAX;
  }
  return MPI_SUM;
}

int64_t total(const std::vector<int>& counts) {
  return std::accumulate(counts.begin(), counts.end(), int64_t{0});
}

}  // namespace

const char* op_kind_name(OpKind kind) {
  static constexpr const char* kNames[] = {"all_reduce", "broadcast", "all_gather", "reduce_scatter",
                                           "reduce",     "gather",    "scatter",    "all_to_all",
                                           "barrier",    "send",      "recv"};
  return kNames[static_cast<int>(kind)];
}

bool is_reduction(OpKind kind) {
  return kind == OpKind::all_reduce || kind == OpKind::reduce_scatter || kind == OpKind::reduce;
}

bool is_rooted(OpKind kind) {
  return kind == OpKind::broadcast || kind == OpKind::reduce || kind == OpKind::gather || kind == OpKind::scatter;
}

std::string signature_text(const CallSignature& sig) {
  const auto kind = static_cast<OpKind>(sig.op);
  const char* dtype = dtype_name(static_cast<DType>(sig.dtype));
  std::ostringstream s;
  s << op_kind_name(kind);
  if (is_reduction(kind)) s << "(" << reduce_op_name(static_cast<ReduceOp>(sig.reduce)) << ")";
  if (kind == OpKind::all_to_all) s << " of " << dtype;
  if (kind != OpKind::barrier && kind != OpKind::all_to_all) s << " of " << sig.count << " " << dtype;
  if (kind == OpKind::gather || kind == OpKind::scatter) s << " per rank";
  if (kind == OpKind::broadcast || kind == OpKind::scatter) s << " from rank " << sig.root;
  if (kind == OpKind::reduce || kind == OpKind::gather) s << " to rank " << sig.root;
  return s.str();
}

CallSignature MpiOp::signature() const {
  return {static_cast<int32_t>(kind), static_cast<int32_t>(reduce), static_cast<int32_t>(dtype),
          is_rooted(kind) ? peer : 0, kind == OpKind::all_to_all ? 0 : n};
}

std::string MpiOp::describe() const {
  std::ostringstream s;
  if (kind == OpKind::send || kind == OpKind::recv) {
    s << op_kind_name(kind) << " of " << n << " " << dtype_name(dtype)
      << (kind == OpKind::send ? " to" : " from") << " rank " << peer << " (tag " << tag << ") on "
      << *group_name;
  } else if (kind == OpKind::all_to_all) {
    s << signature_text(signature()) << " (rank " << rank << " sends " << total(in_counts) << ", receives "
      << total(counts) << ") on " << *group_name << " (collective #" << seq << ")";
  } else {
    s << signature_text(signature()) << " on " << *group_name << " (collective #" << seq << ")";
  }
  return s.str();
}

std::string MpiOp::timeout_detail() const {
  std::string detail = (hierarchical ? hierarchical->stage_text() : "") +
                       (seq > 0 ? control->diagnose(seq, signature()) : "");
  // After diagnose(): its question has made the other ranks write their dumps too.
  const std::string path = flight_dump("timeout: " + describe());
  return detail + (path.empty() ? "" : "; flight record: " + path);
}

MPI_Request MpiOp::start() {
  if (flight) flight->started(seq);
  MPI_Request r = MPI_REQUEST_NULL;
  const MPI_Datatype type = mpi_type(dtype);
  const int count = static_cast<int>(n);
  const bool root = rank == peer;
  // Nothing to move, on any rank (all_to_all's counts are each rank's own).
  if (n == 0 && kind != OpKind::barrier && kind != OpKind::all_to_all) return r;
  switch (kind) {
    case OpKind::all_reduce:
      if (hierarchical) break;  // progress() runs its stages
      if (shm) {  // a copy into this rank's half of the segment for this op's parity
        shm_seq = shm->next_sequence();
        shared_offset = (shm_seq & 1) * (shm->bytes() / 2);
        std::memcpy(shm->data() + shared_offset, out.raw_data(), static_cast<size_t>(n) * dtype_size(dtype));
      } else if (shared) {
        shm_seq = shared->next_sequence();
      }
      if (shm || shared) {
        ShmBuffer* buffer = shm ? shm : shared.get();
        buffer->arrive(shm_seq, shared_offset, static_cast<size_t>(n) * dtype_size(dtype));
        break;  // progress() completes it
      }
      MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, out.raw_data(), count, type, mpi_op(reduce), comm, &r));
      break;
    case OpKind::broadcast:
      MPI_CHECK(MPI_Ibcast(out.raw_data(), count, type, peer, comm, &r));
      break;
    case OpKind::all_gather:
    case OpKind::reduce_scatter:
      if (shared) {
        if (kind == OpKind::all_gather && !in_place)  // this rank's chunk where the others read it
          std::memcpy(static_cast<char*>(out.raw_data()) + displs[rank] * dtype_size(dtype), in.raw_data(),
                      static_cast<size_t>(counts[rank]) * dtype_size(dtype));
        shm_seq = shared->next_sequence();
        shared->arrive(shm_seq, shared_offset, static_cast<size_t>(n) * dtype_size(dtype));
        break;  // progress() completes it
      }
      if (kind == OpKind::reduce_scatter) {
        // A pairwise exchange: each rank sends chunk j of `in` to rank j and combines what it
        // receives (finish), so every rank sends and receives (N - 1) / N of the tensor at
        // once. Open MPI's MPI_Ireduce_scatter reduces the whole tensor to rank 0 and then
        // scatters it: across hosts, whole tensors queue on rank 0's link.
        received_counts.assign(group_size, counts[rank]);
        received_displs.resize(group_size);
        for (int j = 0; j < group_size; ++j) received_displs[j] = j * counts[rank];
        received = Tensor::empty({static_cast<int64_t>(counts[rank]) * group_size}, dtype);
        MPI_CHECK(MPI_Ialltoallv(in.raw_data(), counts.data(), displs.data(), type, received.raw_data(),
                                 received_counts.data(), received_displs.data(), type, comm, &r));
        break;
      }
      MPI_CHECK(MPI_Iallgatherv(in_place ? MPI_IN_PLACE : in.raw_data(), counts[rank], type, out.raw_data(),
                                counts.data(), displs.data(), type, comm, &r));
      break;
    case OpKind::reduce:
      MPI_CHECK(MPI_Ireduce(root ? MPI_IN_PLACE : out.raw_data(), root ? out.raw_data() : nullptr, count,
                            type, mpi_op(reduce), peer, comm, &r));
      break;
    case OpKind::gather:
      MPI_CHECK(MPI_Igather(in.raw_data(), count, type, root ? out.raw_data() : nullptr, count, type, peer,
                            comm, &r));
      break;
    case OpKind::scatter:
      MPI_CHECK(MPI_Iscatter(root ? in.raw_data() : nullptr, count, type, out.raw_data(), count, type, peer,
                             comm, &r));
      break;
    case OpKind::all_to_all:
      MPI_CHECK(MPI_Ialltoallv(in.raw_data(), in_counts.data(), in_displs.data(), type, out.raw_data(),
                               counts.data(), displs.data(), type, comm, &r));
      break;
    case OpKind::barrier:
      MPI_CHECK(MPI_Ibarrier(comm, &r));
      break;
    case OpKind::send:
      MPI_CHECK(MPI_Isend(out.raw_data(), count, type, peer, tag, comm, &r));
      break;
    case OpKind::recv:
      MPI_CHECK(MPI_Irecv(out.raw_data(), count, type, peer, tag, comm, &r));
      break;
  }
  return r;
}

void MpiOp::combine_received() {
  const int64_t chunk = counts[rank];
  with_element_type(dtype, [&](auto zero) {
    using T = decltype(zero);
    auto block = [&](int j) { return received.data<T>() + j * chunk; };
    combine_blocks(out.data<T>(), block, group_size, chunk, reduce);
  });
}

bool MpiOp::progress() {
  if (hierarchical) return hierarchical->progress();
  if (shm_seq == 0) return true;
  if (shm) {  // other ranks may be at the next op already: their range is not this op's
    if (!shm->all_arrived(shm_seq, *this, false)) return false;
    shm->reduce_range(shm_seq, shared_offset, 0, n, dtype, reduce, out.raw_data());  // divides for avg
    return true;
  }
  if (shared) {
    if (!shared_reduced) {
      if (!shared->all_arrived(shm_seq, *this)) return false;
      if (kind == OpKind::reduce_scatter)
        shared->reduce_chunk(shm_seq, shared_offset, n, dtype, reduce, out.raw_data());  // divides for avg
      else if (kind == OpKind::all_gather)
        shared->gather_chunks(shm_seq, shared_offset, n, dtype);
      else
        shared->reduce_share(shm_seq, shared_offset, n, dtype, reduce);  // divides for avg
      shared_reduced = true;
    }
    return shared->all_reduced(shm_seq);
  }
  return true;
}

void MpiOp::finish(const MPI_Status& status) {
  if (flight) flight->completed(seq);
  if (received.defined()) combine_received();
  if (reduce == ReduceOp::avg && group_size > 1 && !shm && !shared && !hierarchical && is_reduction(kind) &&
      (kind != OpKind::reduce || rank == peer))
    divide(out, group_size);
  if (kind == OpKind::recv && n > 0) {
    int got = 0;
    MPI_CHECK(MPI_Get_count(&status, mpi_type(dtype), &got));
    DPT_CHECK(got == n) << "expected " << n << " elements, the message had " << got;
  }
  out = Tensor();
  in = Tensor();
  received = Tensor();
  shared.reset();
  hierarchical.reset();
}

}  // namespace dpt::dist
