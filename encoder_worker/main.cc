// encoder_worker: images + captions (FLUX.2) or video clips + captions (Wan) → the training cache, on CPU. Batch mode
// encodes one dataset and exits (non-zero when any file failed); with --listen it serves EncoderService for the
// coordinator.
#include <absl/flags/flag.h>

#include <string>
#include <vector>

#include "core/device/binary_flags.h"
#include "core/device/device.h"
#include "encoder_worker/encoder_worker_command.h"
#include "rpc/grpc_options.h"

ABSL_FLAG(std::string, dataset, "",
          "dataset folder: images (FLUX.2) or video files / frame folders (Wan) with same-named .txt captions");
ABSL_FLAG(std::string, cache, "", "cache folder to write (reruns keep unchanged samples)");
ABSL_FLAG(std::string, model, "",
          "FLUX.2 or Wan diffusers pipeline folder (vae/, text_encoder/, tokenizer/; the family from "
          "model_index.json)");
ABSL_FLAG(int, threads, 0, "compute threads (0 = all cores)");
ABSL_FLAG(std::string, trigger, "", "trigger word added to every caption");
ABSL_FLAG(std::string, resolution, "1024",
          "bucket target: area = resolution², sides multiples of 16; several (512,768,1024): each image cached at "
          "each, as records NAME@RESOLUTION");
ABSL_FLAG(int64_t, max_sequence_length, 512, "text tokens per caption (pads and truncates to this)");
ABSL_FLAG(int64_t, max_frames, 81, "Wan: frames per clip, the largest 4k+1 up to this");
ABSL_FLAG(int64_t, frame_stride, 1, "Wan: take every N-th source frame");
ABSL_FLAG(std::string, frames, "",
          "Wan: frame buckets, each 4k+1 (1,33,81): a clip takes the longest its frames fill (default: the largest "
          "4k+1 up to --max_frames)");
ABSL_FLAG(std::string, frame_extraction, "head",
          "Wan: how a video becomes clips of its bucket's length: head (the first) | chunk (end to end) | slide (one "
          "every --slide_stride frames) | uniform (--clips_per_video spread evenly); musubi-tuner's modes");
ABSL_FLAG(int64_t, clips_per_video, 0, "Wan: uniform: clips per video; chunk, slide: at most this many (0: all)");
ABSL_FLAG(int64_t, slide_stride, 1, "Wan: slide: a clip starts every N sampled frames (musubi-tuner's frame_stride)");
ABSL_FLAG(
    std::string, conditioning, "auto",
    "Wan image-to-video conditioning to cache with each clip: auto (what the model's transformer needs: the first "
    "frame for a 36-channel I2V model, first and last for FLF2V, none for T2V) | none | first-frame (also TI2V-5B's "
    "image-to-video mode) | first-last-frame");
ABSL_FLAG(std::string, dtype, "fp32", "compute dtype: fp32 | bf16");
ABSL_FLAG(std::string, quantize, "none",
          "the text encoder's Linear weights: none (the compute dtype) | int8 | fp8 (8 bits per output channel, "
          "resident: FLUX.2-dev's Mistral-3 fits a 32 GB box). Part of the cache identity: records made with another "
          "precision re-encode. The service refuses a job whose encode.quantize differs");
ABSL_FLAG(std::string, listen, "", "serve EncoderService on host:port instead of a batch run");
ABSL_FLAG(std::string, cache_root, "",
          "service mode: write caches only inside this directory, symlinks resolved (default: the working "
          "directory); requests naming a cache elsewhere are refused");
ABSL_FLAG(std::string, shard, "",
          "i/N: encode only this worker's share i of N, 0 <= i < N, into a --cache folder of its own; the share "
          "of a sample is a hash of its file name. Join the N folders with --merge");
ABSL_FLAG(std::vector<std::string>, merge, {},
          "comma-separated shard cache folders (all N shares of one split) to join into --cache; needs no --model");
ABSL_FLAG(
    std::vector<std::string>, follow_links_into, {},
    "comma-separated folders outside the dataset folder that its symlinks (images, captions, clips, frames) may "
    "lead into, e.g. a shared photo library or a Hugging Face cache's blobs/ (/ follows every link); by default a "
    "file that resolves outside the dataset folder is refused by name, so a job service's --data_root holds");
ABSL_FLAG(std::string, control, "",
          "FLUX.2 editing: the folder of reference images, musubi-tuner's control_directory layout: for cat.jpg, "
          "cat.png (one) or cat_0.png, cat_1.png, ... (up to 4); each is resized and cropped to its image's bucket");
ABSL_FLAG(std::string, metrics, "",
          "serve Prometheus metrics at http://HOST:PORT/metrics (port 0 picks a free one); empty = no metrics");

namespace {

baton::EncoderWorkerCommand CommandFromFlags() {
  baton::EncoderWorkerCommand command;
  command.dataset = absl::GetFlag(FLAGS_dataset);
  command.cache = absl::GetFlag(FLAGS_cache);
  command.model = absl::GetFlag(FLAGS_model);
  command.threads = absl::GetFlag(FLAGS_threads);
  command.trigger = absl::GetFlag(FLAGS_trigger);
  command.resolution = absl::GetFlag(FLAGS_resolution);
  command.max_sequence_length = absl::GetFlag(FLAGS_max_sequence_length);
  command.max_frames = absl::GetFlag(FLAGS_max_frames);
  command.frame_stride = absl::GetFlag(FLAGS_frame_stride);
  command.frames = absl::GetFlag(FLAGS_frames);
  command.frame_extraction = absl::GetFlag(FLAGS_frame_extraction);
  command.clips_per_video = absl::GetFlag(FLAGS_clips_per_video);
  command.slide_stride = absl::GetFlag(FLAGS_slide_stride);
  command.conditioning = absl::GetFlag(FLAGS_conditioning);
  command.dtype = absl::GetFlag(FLAGS_dtype);
  command.quantize = absl::GetFlag(FLAGS_quantize);
  command.listen = absl::GetFlag(FLAGS_listen);
  command.cache_root = absl::GetFlag(FLAGS_cache_root);
  command.metrics = absl::GetFlag(FLAGS_metrics);
  command.shard = absl::GetFlag(FLAGS_shard);
  command.merge = absl::GetFlag(FLAGS_merge);
  command.follow_links_into = absl::GetFlag(FLAGS_follow_links_into);
  command.control = absl::GetFlag(FLAGS_control);
  return command;
}

}  // namespace

int main(int argc, char** argv) {
  baton::PrepareGrpcPolling();  // before anything initializes gRPC
  baton::ParseBinaryFlags(argc, argv,
                          "encoder_worker --dataset DIR --cache DIR --model PIPELINE_DIR [--threads K] [--shard i/N]\n"
                          "                      [--metrics HOST:PORT] [--follow_links_into DIR,...] [--control DIR]\n"
                          "       encoder_worker --merge SHARD_DIR,SHARD_DIR,... --cache DIR\n"
                          "       encoder_worker --model PIPELINE_DIR --listen HOST:PORT (--tls_dir DIR | --insecure)");
  return baton::RunEncoderWorkerCommand(CommandFromFlags());
}
