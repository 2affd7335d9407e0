// HTML text for the browser view: escaping of everything that comes from a job, a user or a file, and the page
// shell every page shares (its own style sheet and script, served by the view: nothing from the network).
#pragma once

#include <string>

namespace baton {

// & < > " ' escaped: safe in text and in double- or single-quoted attributes.
std::string HtmlEscape(const std::string& text);

// A whole page: <head> with the view's style sheet and script, a top bar (with a sign-out form when `csrf` is set),
// then a banner the script fills when the job service does not answer (hidden until then), then `body`.
std::string HtmlPage(const std::string& title, const std::string& body, const std::string& csrf = "");

// A form that POSTs to `action` with the session's form token and one button.
std::string PostButton(const std::string& action, const std::string& csrf, const std::string& label,
                       const std::string& css_class = "");

}  // namespace baton
