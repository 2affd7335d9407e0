#include "collective/peer_group.h"

// c10d's Gloo header is empty unless USE_C10D_GLOO is defined (torch's CMake targets define it); the Gloo headers it
// includes are Debian's libgloo-dev: only declarations are used, the code is libtorch_cpu's own.
#ifndef USE_C10D_GLOO
#error "libtorch's CMake targets define USE_C10D_GLOO; collective/ needs them"
#endif
#include <absl/strings/str_cat.h>

#include <chrono>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

namespace baton {
namespace {

std::chrono::milliseconds Millis(absl::Duration d) { return std::chrono::milliseconds(absl::ToInt64Milliseconds(d)); }

// c10d reports failures as exceptions; Baton as statuses. ABORTED: the group failed (a peer died, stopped answering
// or never came), not this process; the caller re-forms the group without the one lost.
absl::Status FromException(const std::exception& e, const std::string& what) {
  return absl::AbortedError(absl::StrCat(what, ": ", e.what()));
}

}  // namespace

struct RendezvousStore::Impl {
  c10::intrusive_ptr<c10d::TCPStore> store;
};

RendezvousStore::RendezvousStore(std::unique_ptr<Impl> impl, int port) : impl_(std::move(impl)), port_(port) {}
RendezvousStore::~RendezvousStore() = default;

absl::StatusOr<std::unique_ptr<RendezvousStore>> RendezvousStore::Start() {
  c10d::TCPStoreOptions options;
  options.port = 0;  // any free port
  options.isServer = true;
  options.waitWorkers = false;  // groups of any size come and go
  try {
    auto impl = std::make_unique<Impl>();
    impl->store = c10::make_intrusive<c10d::TCPStore>("0.0.0.0", options);
    const int port = static_cast<int>(impl->store->getPort());
    return std::unique_ptr<RendezvousStore>(new RendezvousStore(std::move(impl), port));
  } catch (const std::exception& e) {
    return FromException(e, "starting the replicas' rendezvous store");
  }
}

struct PeerGroup::Impl {
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group;
};

PeerGroup::PeerGroup(std::unique_ptr<Impl> impl, PeerGroupSpec spec) : impl_(std::move(impl)), spec_(std::move(spec)) {}
PeerGroup::~PeerGroup() = default;

absl::StatusOr<std::unique_ptr<PeerGroup>> PeerGroup::Join(const PeerGroupSpec& spec) {
  if (spec.size < 1 || spec.rank < 0 || spec.rank >= spec.size) {
    return absl::InvalidArgumentError(absl::StrCat("peer group: rank ", spec.rank, " of ", spec.size));
  }
  auto impl = std::make_unique<Impl>();
  if (spec.size == 1) return std::unique_ptr<PeerGroup>(new PeerGroup(std::move(impl), spec));
  if (spec.prefix.empty() || spec.store_host.empty() || spec.store_port <= 0 || spec.bind_host.empty()) {
    return absl::InvalidArgumentError("peer group: the store's address, the prefix and the bind host are required");
  }
  const std::string what = absl::StrCat("joining peer group ", spec.prefix, " as rank ", spec.rank, " of ", spec.size,
                                        " (store ", spec.store_host, ":", spec.store_port, ")");
  try {
    c10d::TCPStoreOptions options;
    options.port = static_cast<uint16_t>(spec.store_port);
    options.isServer = false;
    options.waitWorkers = false;
    options.timeout = Millis(spec.join_timeout);
    auto store = c10::make_intrusive<c10d::TCPStore>(spec.store_host, options);
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>(spec.prefix, store);
    auto gloo = c10d::ProcessGroupGloo::Options::create(Millis(spec.join_timeout));
    gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(spec.bind_host));
    impl->group = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, spec.rank, spec.size, gloo);
    impl->group->setTimeout(Millis(spec.timeout));  // formed: the collectives' own limit from now on
  } catch (const std::exception& e) {
    return FromException(e, what);
  }
  return std::unique_ptr<PeerGroup>(new PeerGroup(std::move(impl), spec));
}

absl::Status PeerGroup::AllreduceSum(at::Tensor& flat) {
  if (!flat.is_contiguous() || flat.scalar_type() != at::kFloat || !flat.device().is_cpu()) {
    return absl::InvalidArgumentError("AllreduceSum takes a contiguous fp32 CPU tensor");
  }
  if (spec_.size == 1) return absl::OkStatus();
  try {
    std::vector<at::Tensor> tensors{flat};
    impl_->group->allreduce(tensors)->wait();
  } catch (const std::exception& e) {
    return FromException(
        e, absl::StrCat("allreduce in peer group ", spec_.prefix, " (rank ", spec_.rank, " of ", spec_.size, ")"));
  }
  return absl::OkStatus();
}

}  // namespace baton
