// Collectives among processes, through libtorch's own c10d: a TCPStore for the rendezvous and a Gloo process group
// (TCP, CPU tensors) for the reduction. Data-parallel replicas use it to sum the LoRA gradients of the stages that
// hold the same blocks (stage s of every replica), so the sums never pass through the coordinator.
//
// Gloo's transport and the store are plain TCP with no authentication (as torchrun's are): run them only among hosts
// that trust each other (deploy/README.md, "More GPUs"). Everything else between Baton's processes is mutual TLS.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>
#include <absl/time/time.h>

#include <memory>
#include <string>

namespace baton {

// The rendezvous point: a c10d TCPStore server on an ephemeral port of every interface, in the process that forms the
// groups (the coordinator). Groups formed through it keep working without it; a new one needs it.
class RendezvousStore {
 public:
  static absl::StatusOr<std::unique_ptr<RendezvousStore>> Start();
  ~RendezvousStore();
  int port() const { return port_; }

 private:
  struct Impl;
  explicit RendezvousStore(std::unique_ptr<Impl> impl, int port);
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

// Where a member finds the store and the others, and who it is among them.
struct PeerGroupSpec {
  std::string store_host;  // the RendezvousStore's host, as this member reaches it
  int store_port = 0;
  std::string prefix;  // the group's keys in the store: unique per group and formation ("<run>/stage1/gen3")
  int rank = 0;        // in [0, size)
  int size = 1;
  std::string bind_host;  // the address this member's peers reach it at (its Gloo device binds to it)
  absl::Duration join_timeout = absl::Seconds(10);  // forming the group (a member that never comes)
  absl::Duration timeout = absl::Seconds(60);       // every collective after
};

// One member of a group of `size` processes. Joining blocks until every member has joined (or the join timeout). A
// collective fails with ABORTED (it cannot be cancelled) when a peer dies (at once) or stops answering (after the
// timeout); the group is then spent: form a new one, under a new prefix, among those left.
class PeerGroup {
 public:
  static absl::StatusOr<std::unique_ptr<PeerGroup>> Join(const PeerGroupSpec& spec);
  ~PeerGroup();
  int rank() const { return spec_.rank; }
  int size() const { return spec_.size; }
  const std::string& prefix() const { return spec_.prefix; }

  // Sums `flat` (a contiguous fp32 CPU tensor) over the members, in place; every member gets the same bytes (Gloo's
  // ring sums each element in an order fixed by the group's size and the tensor's length). A group of one: as it is.
  absl::Status AllreduceSum(at::Tensor& flat);

 private:
  struct Impl;
  PeerGroup(std::unique_ptr<Impl> impl, PeerGroupSpec spec);
  std::unique_ptr<Impl> impl_;
  PeerGroupSpec spec_;
};

}  // namespace baton
