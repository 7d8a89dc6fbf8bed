// The frames that address a reply on the server's ROUTER socket.
#pragma once

#include <string>
#include <vector>

namespace d2k::env {

// The peer's routing id, plus an empty delimiter for REQ peers.
using Route = std::vector<std::string>;

}  // namespace d2k::env
