// The view's front pages: the sign-in form, and the jobs page (every job of the job service with its progress and
// actions, and the form that submits a job file). The jobs table is also served alone, for the page to refresh.
#pragma once

#include <string>
#include <vector>

#include "baton/v1/job_service.pb.h"

namespace baton {

// `message`: why the last sign-in failed ("" at first).
std::string LoginPage(const std::string& message);

// What the submit form held, and why the job service refused it (file:line), to show it again.
struct SubmitForm {
  std::string job_yaml, job_file, name, steps;
  std::string error;
};

std::string JobsPage(const std::vector<v1::JobInfo>& jobs, const std::string& csrf, const SubmitForm& form);
std::string JobsTable(const std::vector<v1::JobInfo>& jobs, const std::string& csrf);

// The actions a job allows now (stop, continue, the LoRA downloads), as buttons and links.
std::string JobActions(const v1::JobInfo& job, const std::string& csrf);
// A progress bar "step / steps".
std::string ProgressBar(const v1::JobInfo& job);

}  // namespace baton
