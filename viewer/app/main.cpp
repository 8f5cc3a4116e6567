// attnlab-view: the interactive lab window (SDL2 + Dear ImGui 1.86 with the SDL_Renderer backend).
// One linear main, after Dear ImGui's example_sdl_sdlrenderer: parse flags (bad ones: one line
// "error: ..." and exit 2), build the app (the session runs the first backend call), init SDL with
// null checks that print SDL_GetError(), then event -> update -> draw -> present, teardown in
// reverse. --screenshot renders three frames without input and writes a PNG (software renderer, so
// it works with SDL_VIDEODRIVER=dummy and gives the same pixels everywhere); --bench-redraw needs no
// window at all.
#include "core/lang_args.h"
#include "viewer/app/decode_bench.h"
#include "viewer/app/redraw_bench.h"
#include "viewer/session/keymap.h"
#include "viewer/app/options.h"
#include "viewer/draw/png_io.h"
#include "viewer/draw/strings.h"
#include "viewer/app/app.h"
#include "viewer/app/fuzz.h"
#include "viewer/session/export.h"
#include "viewer/ui/kit.h"

#include <SDL.h>
#include <imgui.h>
#include <imgui_internal.h>  // ClosePopupToLevel: Esc closing an open list
#include <imgui_impl_sdl.h>
#include <imgui_impl_sdlrenderer.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <memory>

namespace {

using namespace attnlab;
using namespace attnlab::viewer;

Key key_from_sdl(SDL_Keycode k) {
  switch (k) {
    case SDLK_SPACE: return Key::Space;
    case SDLK_LEFT: return Key::Left;
    case SDLK_RIGHT: return Key::Right;
    case SDLK_HOME: return Key::Home;
    case SDLK_UP: return Key::Up;
    case SDLK_DOWN: return Key::Down;
    case SDLK_m: return Key::M;
    case SDLK_LEFTBRACKET: return Key::LeftBracket;
    case SDLK_RIGHTBRACKET: return Key::RightBracket;
    case SDLK_l: return Key::L;
    case SDLK_s: return Key::S;
    case SDLK_F1: return Key::F1;
    case SDLK_ESCAPE: return Key::Escape;
    case SDLK_PLUS:
    case SDLK_EQUALS:
    case SDLK_KP_PLUS: return Key::Plus;
    case SDLK_MINUS:
    case SDLK_KP_MINUS: return Key::Minus;
    case SDLK_0:
    case SDLK_KP_0: return Key::Zero;
    case SDLK_F11: return Key::F11;
    default: return Key::Other;
  }
}

// Reads back what the renderer drew this frame (before present) as RGBA rows.
Image read_back(SDL_Renderer* r) {
  Image img;
  if (SDL_GetRendererOutputSize(r, &img.width, &img.height) != 0) return {};
  img.rgba.resize(static_cast<std::size_t>(img.width) * img.height * 4);
  if (SDL_RenderReadPixels(r, nullptr, SDL_PIXELFORMAT_RGBA32, img.rgba.data(), img.width * 4) != 0) return {};
  return img;
}

int fail(int code, const std::string& msg) {
  std::fprintf(stderr, "error: %s\n", msg.c_str());
  return code;
}

// A refusal as the command line prints it: catalogued ones (core/messages.h) in --lang's language
// (lang_from_args, as attnlab's), the viewer's own flags' checks in English.
int refuse(const InputError& e, int argc, char** argv) { return fail(2, message_of(e).text(lang_from_args(argc, argv))); }

}  // namespace

int main(int argc, char** argv) {
  ViewerOptions opts;
  try {
    opts = parse_viewer_args(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const InputError& e) {
    return refuse(e, argc, argv);
  }
  if (opts.help) {
    std::fputs(viewer_usage().c_str(), stdout);
    return 0;
  }
  if (opts.bench_decode_seconds > 0) {
    try {
      return run_decode_bench(opts, std::cout).check_pass ? 0 : 1;
    } catch (const InputError& e) {
      return refuse(e, argc, argv);
    } catch (const std::exception& e) {
      return fail(1, e.what());
    }
  }
  if (opts.bench_redraw) {
    try {
      return run_redraw_bench(opts, std::cout).check_pass ? 0 : 1;  // wrong numbers fail, however fast
    } catch (const InputError& e) {
      return refuse(e, argc, argv);
    } catch (const std::exception& e) {
      return fail(1, e.what());
    }
  }

  // The UI fuzzer runs the loop without a window too, and without waiting for events.
  const bool fuzzing = opts.fuzz_events > 0;
  const bool headless = !opts.screenshot.empty() || fuzzing;
  // Before the App (whose first backend run may take seconds at 16384 tokens): without a display
  // SDL quietly picks its offscreen driver, a window nobody can see and a viewer that
  // never ends. Refuse that for the interactive viewer; headless rendering takes the
  // dummy driver straight away (no Wayland probe printing its own "error:" line first).
  const auto env_set = [](const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0';
  };
  const bool driver_chosen = env_set("SDL_VIDEODRIVER");
  if (fuzzing) {
    SDL_setenv("SDL_VIDEODRIVER", "dummy", 1);  // no window manager, no display needed
  } else if (!driver_chosen && !env_set("DISPLAY") && !env_set("WAYLAND_DISPLAY")) {
    if (!headless) {
      return fail(1, "no display (DISPLAY and WAYLAND_DISPLAY are unset): the viewer needs a window; "
                     "use --screenshot FILE.png to render without one");
    }
    SDL_setenv("SDL_VIDEODRIVER", "dummy", 1);
  }
  // DISPLAY without Wayland: X11 alone. SDL would otherwise, when the X server does not answer
  // (a stale DISPLAY), go on to probe Wayland, whose library prints its own "error:" line, and
  // end on its offscreen driver.
  const bool x11_only = !fuzzing && !driver_chosen && env_set("DISPLAY") && !env_set("WAYLAND_DISPLAY");
  if (x11_only) SDL_setenv("SDL_VIDEODRIVER", "x11", 1);
  std::unique_ptr<App> app;
  // A streamed problem's first output comes in the pass that pools the heatmap (one pass, not two).
  opts.output_with_first_view = true;
  try {
    app = std::make_unique<App>(opts, !headless);
  } catch (const InputError& e) {
    return refuse(e, argc, argv);
  } catch (const std::exception& e) {
    return fail(1, e.what());
  }
  app->lang = opts.lang.value_or(lang_from_env());
  app->export_dir = opts.export_dir;
  app->play.set_step(opts.step);
  if (SDL_Init(SDL_INIT_VIDEO | SDL_INIT_TIMER) != 0) {
    if (!headless && x11_only)
      return fail(1, std::string("cannot open the X display '") + std::getenv("DISPLAY") +
                         "' (SDL_Init: " + SDL_GetError() +
                         "); use --screenshot FILE.png to render without one");
    if (!headless) return fail(1, std::string("SDL_Init: ") + SDL_GetError());
    SDL_setenv("SDL_VIDEODRIVER", "dummy", 1);
    if (SDL_Init(SDL_INIT_VIDEO | SDL_INIT_TIMER) != 0) return fail(1, std::string("SDL_Init: ") + SDL_GetError());
  }
  if (!headless) {
    const std::string driver = SDL_GetCurrentVideoDriver() ? SDL_GetCurrentVideoDriver() : "";
    if (driver == "offscreen" || driver == "dummy") {
      SDL_Quit();
      return fail(1, "SDL video driver '" + driver + "' shows no window: the viewer needs a display; "
                     "use --screenshot FILE.png to render without one");
    }
  }
  const Uint32 win_flags = SDL_WINDOW_RESIZABLE | (headless ? SDL_WINDOW_HIDDEN : SDL_WINDOW_SHOWN);
  SDL_Window* window = SDL_CreateWindow(tr(app->lang, S::AppTitle), SDL_WINDOWPOS_CENTERED, SDL_WINDOWPOS_CENTERED,
                                        opts.width, opts.height, win_flags);
  if (!window) return fail(1, std::string("SDL_CreateWindow: ") + SDL_GetError());
  SDL_SetWindowMinimumSize(window, kMinWindowW, kMinWindowH);
  SDL_Renderer* renderer = nullptr;
  if (!headless) renderer = SDL_CreateRenderer(window, -1, SDL_RENDERER_ACCELERATED | SDL_RENDERER_PRESENTVSYNC);
  if (!renderer) renderer = SDL_CreateRenderer(window, -1, SDL_RENDERER_SOFTWARE);
  if (!renderer) return fail(1, std::string("SDL_CreateRenderer: ") + SDL_GetError());
  app->window = window;
  app->renderer = renderer;

  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;  // the layout is computed, nothing to persist
  ImGui::StyleColorsDark();
  ImGui::GetStyle().WindowRounding = 0;
  ImGui::GetStyle().FrameRounding = 3;
  ImGui_ImplSDL2_InitForSDLRenderer(window);
  ImGui_ImplSDLRenderer_Init(renderer);
  // The font follows the window's height (18 px at 800, 22 px at 1080, 29 px at 1440: font_px_for)
  // times the UI scale; it is re-rasterised whenever that size changes (a resize, F11, Ctrl + / −),
  // never bitmap-stretched.
  app->ui_scale = opts.ui_scale;
  // The windowed size F11 returns to (the window's size when it left it).
  int windowed_w = opts.width, windowed_h = opts.height;
  if (opts.fullscreen) SDL_SetWindowFullscreen(window, SDL_WINDOW_FULLSCREEN_DESKTOP);
  const ImGuiStyle base_style = ImGui::GetStyle();
  auto fit_fonts = [&] {
    int w = 0, h = 0;
    SDL_GetWindowSize(window, &w, &h);
    const float px = font_px_for(h > 0 ? h : opts.height, app->ui_scale);
    // Rebuilt too when a problem loaded in the window needs glyphs the atlas lacks (its tokens).
    if (px == app->font_px && io.Fonts->IsBuilt() && !glyphs_missing(*app)) return;
    io.Fonts->Clear();
    load_fonts(*app, px);
    io.Fonts->Build();
    ImGui_ImplSDLRenderer_DestroyFontsTexture();
    ImGui_ImplSDLRenderer_CreateFontsTexture();
    // Paddings and spacings grow with the text (the style's sizes are for a 13 px font).
    ImGui::GetStyle() = base_style;
    ImGui::GetStyle().ScaleAllSizes(std::max(1.0f, px / 18.0f));
  };
  app->font_px = 0;
  fit_fonts();

  int exit_code = 0;
  std::unique_ptr<Fuzzer> fuzz;
  if (fuzzing) {
    // The command that reproduces the run, less the fuzzer's own flags (its report adds them).
    std::string reproduce = "attnlab-view";
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--fuzz-events" || a == "--fuzz-seed") {
        ++i;
        continue;
      }
      reproduce += " " + a;
    }
    try {
      fuzz = std::make_unique<Fuzzer>(*app, window, opts.fuzz_events, opts.fuzz_seed.value_or(1), reproduce);
    } catch (const std::exception& e) {
      return fail(1, e.what());
    }
  }

  bool dump_failed = false;
  int frames = 0;
  Uint64 last = SDL_GetPerformanceCounter();
  Lang title_lang = app->lang;
  bool close_lists = false;  // Esc pressed while a list was open
  while (!app->quit) {
    if (fuzz) fuzz->feed();
    SDL_Event ev;
    while (SDL_PollEvent(&ev)) {
      ImGui_ImplSDL2_ProcessEvent(&ev);
      if (ev.type == SDL_QUIT) app->quit = true;
      if (ev.type == SDL_MOUSEBUTTONDOWN && ev.button.button == SDL_BUTTON_LEFT && ev.button.clicks >= 2)
        app->double_click = true;
      if (ev.type == SDL_WINDOWEVENT && ev.window.event == SDL_WINDOWEVENT_CLOSE &&
          ev.window.windowID == SDL_GetWindowID(window)) {
        app->quit = true;
      }
      // Shortcuts are off while a text field has the keyboard (typing a temperature).
      if (ev.type == SDL_KEYDOWN && !io.WantTextInput) {
        const Key k = key_from_sdl(ev.key.keysym.sym);
        const bool repeatable = k == Key::Left || k == Key::Right || k == Key::Up || k == Key::Down ||
                                k == Key::LeftBracket || k == Key::RightBracket || k == Key::Plus ||
                                k == Key::Minus;
        if (ev.key.repeat && !repeatable) continue;
        // Esc with a list open (a combo's, the layers') closes the list, and no more (ImGui
        // leaves it open without keyboard navigation; it had quit the lab).
        if (k == Key::Escape && ImGui::IsPopupOpen("", ImGuiPopupFlags_AnyPopupId | ImGuiPopupFlags_AnyPopupLevel)) {
          close_lists = true;
          continue;
        }
        if (auto a = action_for_key(k, (ev.key.keysym.mod & KMOD_SHIFT) != 0, (ev.key.keysym.mod & KMOD_CTRL) != 0))
          apply_action(*app, *a);
      }
    }
    app->session.apply_temperature_steps();  // the [ and ] presses of this frame, as one run
    app->session.poll();  // adopt the runs the worker finished
    if (app->fullscreen_requested) {
      app->fullscreen_requested = false;
      const bool on = (SDL_GetWindowFlags(window) & SDL_WINDOW_FULLSCREEN_DESKTOP) != 0;
      if (!on) SDL_GetWindowSize(window, &windowed_w, &windowed_h);
      SDL_SetWindowFullscreen(window, on ? 0 : SDL_WINDOW_FULLSCREEN_DESKTOP);
      // Back in a window, SDL keeps the fullscreen size until the window system reports the new
      // one, which may never come (no window manager): the size is set again, and SDL's own
      // size, which the layout and the state dump read each frame, follows at once.
      if (on) SDL_SetWindowSize(window, windowed_w, windowed_h);
    }
    fit_fonts();
    const Uint64 now = SDL_GetPerformanceCounter();
    // The fuzzer's frames advance playback by a fixed step, so that a seed repeats exactly.
    app->play.tick(fuzz ? 1.0 / 30 : static_cast<double>(now - last) / SDL_GetPerformanceFrequency());
    last = now;
    if (app->lang != title_lang) {
      title_lang = app->lang;
      SDL_SetWindowTitle(window, tr(app->lang, S::AppTitle));
    }

    ImGui_ImplSDLRenderer_NewFrame();
    ImGui_ImplSDL2_NewFrame();
    if (fuzz) fuzz->pointer_to_imgui();
    io.DisplayFramebufferScale = ImVec2(1, 1);
    ImGui::NewFrame();
    if (close_lists) ImGui::ClosePopupToLevel(0, true);
    close_lists = false;
    draw_frame(*app);
    ImGui::Render();
    app->double_click = false;
    SDL_SetRenderDrawColor(renderer, 20, 20, 24, 255);
    SDL_RenderClear(renderer);
    // The fuzzer builds every frame's windows but rasterises one in eight (and every screenshot):
    // SDL's software renderer is most of a frame's time.
    if (!fuzz || app->screenshot_requested || fuzz->rasterise())
      ImGui_ImplSDLRenderer_RenderDrawData(ImGui::GetDrawData());

    // Headless: the third frame is settled (windows sized, fonts uploaded, texture filled).
    if (headless && !fuzz && ++frames >= 3) {
      try {
        write_png(opts.screenshot, read_back(renderer));
      } catch (const std::exception& e) {
        exit_code = fail(2, message_of(e).text(app->lang));
      }
      break;
    }
    if (app->screenshot_requested) {
      app->screenshot_requested = false;
      const std::string name = unused_name(export_stem(app->export_dir), ".png");
      try {
        write_png(name, read_back(renderer));
        set_status(*app, [name](Lang l) { return fmt(tr(l, S::ScreenshotSaved), name.c_str()); });
      } catch (const std::exception& e) {
        set_status(*app, [m = message_of(e)](Lang l) { return std::string(tr(l, S::ErrorPrefix)) + m.text(l); });
      }
    }
    SDL_RenderPresent(renderer);
    try {
      dump_state_if_changed(*app);
    } catch (const std::exception& e) {
      exit_code = fail(2, message_of(e).text(app->lang));
      dump_failed = true;  // said once; not again at exit
      break;
    }
    if (fuzz) {
      if (!fuzz->check()) {
        exit_code = 1;
        break;
      }
      if (fuzz->done()) {
        std::printf("%s\n", fuzz->summary().c_str());
        break;
      }
      continue;
    }
    // Sleep until an event arrives, or for frame_wait_ms (longer while a view measures, shorter
    // while playing or computing), instead of spinning: the software renderer has no vsync to pace
    // the loop.
    const bool measuring = std::any_of(app->views.begin(), app->views.end(), [](const auto& v) { return v->measuring(); });
    SDL_WaitEventTimeout(nullptr, frame_wait_ms(measuring, app->play.playing(), app->session.busy()));
  }
  if (!dump_failed) {
    try {
      dump_state_if_changed(*app);
    } catch (const std::exception& e) {
      exit_code = fail(2, message_of(e).text(app->lang));
    }
  }

  fuzz.reset();
  app->speaker.stop();
  app->release_textures();  // before the renderer they belong to
  ImGui_ImplSDLRenderer_Shutdown();
  ImGui_ImplSDL2_Shutdown();
  ImGui::DestroyContext();
  SDL_DestroyRenderer(renderer);
  SDL_DestroyWindow(window);
  SDL_Quit();
  return exit_code;
}
