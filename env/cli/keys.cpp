// `d2k keys`: CURVE key pairs for authenticated remote access (issue 19.1; protocol/curve.hpp).
//   d2k keys server [DIR]              DIR/server.key (secret, 0600) and DIR/server.pub
//   d2k keys client [DIR] --name NAME  DIR/NAME.key and DIR/NAME.pub (a line for the allowlist)
//   d2k keys public FILE               the public key of a .key or .pub file
#include <cstdlib>
#include <iostream>

#include "env/cli/commands.hpp"
#include "protocol/curve.hpp"

namespace d2k::cli {

namespace {

std::filesystem::path default_key_dir() {
  const char* home = std::getenv("HOME");
  return std::filesystem::path(home && *home ? home : ".") / ".d2k";
}

}  // namespace

void add_keys(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand("keys", "Make CURVE keys for serving beyond loopback (server pair, client pairs)");
  cmd->require_subcommand(1);
  auto dir = std::make_shared<std::string>(default_key_dir().string());
  auto name = std::make_shared<std::string>("client");
  auto file = std::make_shared<std::string>();

  auto* server = cmd->add_subcommand("server", "Make the server's key pair: DIR/server.key (secret) and DIR/server.pub");
  server->add_option("dir", *dir, "Folder of the keys")->capture_default_str();
  server->callback([&run, dir] {
    run = [dir]() -> int {
      const auto k = curve::write_key_files(*dir, "server");
      std::cout << "server key pair: " << (std::filesystem::path(*dir) / "server.key").string() << " (keep secret)\n"
                << "public key:      " << k.public_key << " (" << (std::filesystem::path(*dir) / "server.pub").string()
                << ", give it to clients as D2K_SERVER_KEY)\n"
                << "serve with:      d2k serve --endpoint tcp://0.0.0.0:5555 --server-key "
                << (std::filesystem::path(*dir) / "server.key").string() << " --allowed-keys "
                << (std::filesystem::path(*dir) / "allowed_keys").string() << "\n";
      return 0;
    };
  });

  auto* client = cmd->add_subcommand("client", "Make a client's key pair: DIR/NAME.key (secret) and DIR/NAME.pub");
  client->add_option("dir", *dir, "Folder of the keys")->capture_default_str();
  client->add_option("--name", *name, "The client's name (file names and its allowlist line)")->capture_default_str();
  client->callback([&run, dir, name] {
    run = [dir, name]() -> int {
      const auto k = curve::write_key_files(*dir, *name);
      const auto pub = (std::filesystem::path(*dir) / (*name + ".pub")).string();
      std::cout << "client key pair: " << (std::filesystem::path(*dir) / (*name + ".key")).string()
                << " (keep secret; the client's D2K_CLIENT_KEY)\n"
                << "public key:      " << k.public_key << "\n"
                << "allow it:        cat " << pub << " >> ALLOWLIST   (the server's --allowed-keys file; re-read "
                << "when it changes)\n";
      return 0;
    };
  });

  auto* show = cmd->add_subcommand("public", "Print the public key of a .key or .pub file");
  show->add_option("file", *file, "A .key or .pub file")->required();
  show->callback([&run, file] {
    run = [file]() -> int {
      std::cout << curve::read_public_key(*file) << "\n";
      return 0;
    };
  });
}

}  // namespace d2k::cli
