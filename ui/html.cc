#include "ui/html.h"

#include <absl/strings/str_cat.h>

namespace baton {

std::string HtmlEscape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

std::string PostButton(const std::string& action, const std::string& csrf, const std::string& label,
                       const std::string& css_class) {
  return absl::StrCat("<form method=\"post\" class=\"inline\" action=\"", HtmlEscape(action),
                      "\"><input type=\"hidden\" name=\"csrf\" value=\"", HtmlEscape(csrf), "\"><button class=\"",
                      HtmlEscape(css_class), "\" type=\"submit\">", HtmlEscape(label), "</button></form>");
}

std::string HtmlPage(const std::string& title, const std::string& body, const std::string& csrf) {
  std::string bar = "<header><a class=\"brand\" href=\"/\">Baton</a><nav><a href=\"/\">Jobs</a></nav>";
  if (!csrf.empty()) absl::StrAppend(&bar, PostButton("/logout", csrf, "Sign out", "quiet"));
  bar += "</header>";
  return absl::StrCat(
      "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" "
      "content=\"width=device-width, initial-scale=1\"><title>",
      HtmlEscape(title),
      " · Baton</title><link rel=\"stylesheet\" href=\"/static/app.css\"><script src=\"/static/app.js\" defer>"
      "</script></head><body>",
      bar, "<main><div id=\"service-status\" class=\"banner\" role=\"status\" hidden></div>", body,
      "</main></body></html>");
}

}  // namespace baton
