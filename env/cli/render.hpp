// Text views of observations and step replies for people at a terminal (play, demo).
#pragma once

#include <string>

#include "protocol/codec.hpp"

namespace d2k::cli {

std::string render_task(const protocol::Value& observation);
std::string render_guidance_titles(const protocol::Value& observation);
std::string render_guidance(const protocol::Value& observation);
std::string render_status(const protocol::Value& observation);
std::string render_last(const protocol::Value& last);
std::string render_step(const protocol::Value& step_reply);

}  // namespace d2k::cli
