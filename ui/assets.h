// The view's style sheet and script, compiled in: the page loads nothing from the network.
#pragma once

#include <string>

namespace baton {

const std::string& AppCss();
// Refreshes the jobs table every 2 s while the page is visible; on a job's page follows its server-sent events
// (one refresh of the panel per burst of steps, of the gallery per rendering) and the smoothing control; fills the
// submit form from a chosen file; switches the compared prompt.
const std::string& AppJs();

}  // namespace baton
