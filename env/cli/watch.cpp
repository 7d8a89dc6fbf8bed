// `d2k watch [SESSION]`: follows running episodes from another terminal through the server's
// episode-event PUB socket (topic = the session's watch id: the first 8 hex digits of its id, which never goes out whole). Read-only: the server never waits for watchers.
#include <iostream>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "env/cli/recording.hpp"
#include "env/recorder.hpp"
#include "protocol/client.hpp"
#include "protocol/curve.hpp"

namespace d2k::cli {

using nlohmann::json;

namespace {

// The events endpoint: `hello` says it when the server reports one, else the documented default.
std::string discover_events(const std::string& server_endpoint) {
  try {
    Client::Options o;
    o.timeout = std::chrono::milliseconds(2000);
    o.retries = 0;
    Client c(server_endpoint, o);
    json h = c.hello();
    for (const char* key : {"events_endpoint", "events"})
      if (h.contains(key) && h[key].is_string() && !h[key].get<std::string>().empty()) return h[key].get<std::string>();
  } catch (const std::exception&) {
  }
  return env::default_events_endpoint(server_endpoint);
}

}  // namespace

void add_watch(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand("watch", "Follow running episodes live (actions, diffs, diagnostics, rewards)");
  auto session = std::make_shared<std::string>();
  auto endpoint = std::make_shared<std::string>("tcp://127.0.0.1:5555");
  auto events = std::make_shared<std::string>();
  auto as_json = std::make_shared<bool>(false);
  auto count = std::make_shared<std::size_t>(0);
  cmd->add_option("session", *session, "Only this session (default: every session); exits when it ends");
  cmd->add_option("--endpoint", *endpoint, "The server (its events endpoint is asked for / derived)")
      ->capture_default_str();
  cmd->add_option("--events", *events, "The events endpoint itself (default: server port + 1, or <ipc path>.events)");
  cmd->add_flag("--json", *as_json, "One JSON event per line instead of text");
  cmd->add_option("--count", *count, "Exit after this many events (0 = never)");
  cmd->callback([&run, session, endpoint, events, as_json, count] {
    run = [session, endpoint, events, as_json, count]() -> int {
      std::string where = events->empty() ? discover_events(*endpoint) : *events;
      if (where.empty()) {
        std::cerr << "d2k watch: cannot derive an events endpoint from " << *endpoint << "; pass --events\n";
        return 2;
      }
      zmq::context_t ctx{1};
      zmq::socket_t sub(ctx, zmq::socket_type::sub);
      sub.set(zmq::sockopt::linger, 0);
      const std::string topic_wanted = session->empty() ? std::string() : d2k::env::watch_id(*session);
      sub.set(zmq::sockopt::subscribe, topic_wanted);
      // A CURVE server (D2K_SERVER_KEY, D2K_CLIENT_KEY) sends this key only the sessions it opened.
      if (auto keys = curve::client_keys_from_env()) curve::make_client(sub.handle(), *keys);
      sub.connect(where);
      std::cout << "watching " << where << " (" << (session->empty() ? "all sessions" : "session " + *session)
                << ")" << std::endl;
      std::map<std::string, FileMap> files;
      std::size_t seen = 0;
      for (;;) {
        std::vector<zmq::message_t> frames;
        auto got = zmq::recv_multipart(sub, std::back_inserter(frames));
        if (!got || frames.size() != 2) continue;
        std::string topic = frames[0].to_string();
        topic = topic.substr(topic.rfind(':') + 1);  // a CURVE server's topics are "<your key>:<watch id>"
        if (!session->empty() && topic != topic_wanted) continue;  // a longer topic with the same prefix
        json ev;
        try {
          const auto* p = static_cast<const std::uint8_t*>(frames[1].data());
          ev = json::from_msgpack(p, p + frames[1].size());
        } catch (const json::exception& e) {
          std::cerr << "d2k watch: undecodable event dropped: " << e.what() << "\n";
          continue;
        }
        std::string kind = ev.value("kind", "");
        if (*as_json) {
          std::cout << ev.dump() << std::endl;
        } else {
          std::string tag = "[" + topic.substr(0, 8) + "] ";
          if (kind == "begin" || kind == "exchange") {
            std::string text = render_exchange(ev.value("request", json()), ev.value("reply", json()), files[topic]);
            std::cout << tag << "#" << ev.value("n", 0) << " " << text << std::flush;
          } else if (kind == "end") {
            std::cout << tag << "ended: " << ev.value("end_reason", "") << ", " << ev.value("steps", 0)
                      << " steps, total reward " << ev.value("total_reward", 0.0) << ", outcome "
                      << ev.value("outcome", "") << std::endl;
            files.erase(topic);
          }
        }
        ++seen;
        if (kind == "end" && !session->empty()) return 0;
        if (*count && seen >= *count) return 0;
      }
    };
  });
}

}  // namespace d2k::cli
