#include "rpc/peer_address.h"

#include <absl/strings/str_replace.h>
#include <absl/strings/strip.h>

namespace baton {

std::string PeerHost(absl::string_view peer) {
  if (absl::ConsumePrefix(&peer, "ipv4:")) {
    const size_t colon = peer.rfind(':');
    return std::string(colon == absl::string_view::npos ? peer : peer.substr(0, colon));
  }
  if (absl::ConsumePrefix(&peer, "ipv6:")) {
    std::string s = absl::StrReplaceAll(peer, {{"%5B", "["}, {"%5D", "]"}, {"%25", "%"}});
    const size_t open = s.find('['), close = s.find(']');
    if (open == std::string::npos || close == std::string::npos || close < open) return "";
    return s.substr(open + 1, close - open - 1);
  }
  return "";
}

}  // namespace baton
