#include "viewer/gl_surface.hpp"

#include <cstddef>
#include <string>
#include <vector>

// Our own GL calls go through glvnd's libOpenGL, which dispatches to whichever context is current
// (EGL or GLX). ImGui's OpenGL 3 backend loads its functions itself (its gl3w loader opens
// libGL.so.1), so libGL.so.1 must be installed even for headless rendering.
#define GL_GLEXT_PROTOTYPES
#include <GL/gl.h>
#include <GL/glext.h>
#define GLFW_INCLUDE_NONE
#include <EGL/egl.h>
#include <EGL/eglext.h>
#include <GLFW/glfw3.h>
#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>
#include <fmt/format.h>
#include <imgui.h>

#include "common/error.hpp"

namespace strata::viewer {

namespace {

constexpr const char* kGlslVersion = "#version 330";  // GLSL of OpenGL 3.3 core
constexpr float kFrameSeconds = 1.0f / 60.0f;         // headless frames are 60 Hz apart

[[noreturn]] void throw_egl_error(const char* call) {
  throw SurfaceError(fmt::format(
      "{} failed (EGL error 0x{:04X}); headless rendering needs Mesa's EGL: install libegl-mesa0 "
      "and libgl1-mesa-dri",
      call, eglGetError()));
}

// The ImGui context both surfaces use, with its OpenGL 3 backend on the current GL context: the
// dark style, no imgui.ini and no log file (the viewer keeps no state between runs, and tests
// write nothing).
class ImGuiSession {
 public:
  ImGuiSession() : context_(ImGui::CreateContext()) {
    ImGui::SetCurrentContext(context_);  // CreateContext makes it current only when none is
    ImGui::StyleColorsDark();
    ImGuiIO& io = ImGui::GetIO();
    io.IniFilename = nullptr;
    io.LogFilename = nullptr;
    if (!ImGui_ImplOpenGL3_Init(kGlslVersion)) {
      ImGui::DestroyContext(context_);
      throw SurfaceError(
          "ImGui_ImplOpenGL3_Init failed: ImGui cannot load OpenGL 3.3 functions from libGL.so.1; "
          "install libgl1 and libgl1-mesa-dri");
    }
  }
  ~ImGuiSession() {
    ImGui::SetCurrentContext(context_);
    ImGui_ImplOpenGL3_Shutdown();
    ImGui::DestroyContext(context_);
  }
  ImGuiSession(const ImGuiSession&) = delete;
  ImGuiSession& operator=(const ImGuiSession&) = delete;

  void make_current() const { ImGui::SetCurrentContext(context_); }

 private:
  ImGuiContext* context_;
};

// Clears the bound framebuffer (width_px x height_px) to the window background color, opaque,
// and renders ImGui's draw data into it. The backend blends alpha as src + dst (1 - src), so the
// frame stays opaque under translucent windows and screenshots are too.
void render_draw_data(int width_px, int height_px) {
  glViewport(0, 0, width_px, height_px);
  const ImVec4 background = ImGui::GetStyle().Colors[ImGuiCol_WindowBg];
  glClearColor(background.x, background.y, background.z, 1.0f);
  glClear(GL_COLOR_BUFFER_BIT);
  ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
}

// The bound read framebuffer's width_px x height_px pixels, the top row first (OpenGL's rows
// start at the bottom).
Image read_pixels(int width_px, int height_px) {
  Image image{width_px, height_px, {}};
  const size_t row_bytes = static_cast<size_t>(width_px) * 4;
  std::vector<uint8_t> bottom_up(row_bytes * static_cast<size_t>(height_px));
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadPixels(0, 0, width_px, height_px, GL_RGBA, GL_UNSIGNED_BYTE, bottom_up.data());
  image.rgba.reserve(bottom_up.size());
  for (int row = height_px - 1; row >= 0; --row) {
    const auto first = bottom_up.begin() + static_cast<std::ptrdiff_t>(row_bytes * row);
    image.rgba.insert(image.rgba.end(), first, first + static_cast<std::ptrdiff_t>(row_bytes));
  }
  return image;
}

// Mesa's surfaceless display, initialized on first use and never terminated: there is one per
// process (eglGetPlatformDisplayEXT returns the same handle each time), eglTerminate is not
// reference counted (it would destroy the contexts of every live renderer), and Mesa 22 leaks on
// each eglTerminate (LeakSanitizer reports 112 bytes). A failed initialization is retried on the
// next call.
EGLDisplay surfaceless_display() {
  static const EGLDisplay display = [] {
    const auto get_platform_display = reinterpret_cast<PFNEGLGETPLATFORMDISPLAYEXTPROC>(
        eglGetProcAddress("eglGetPlatformDisplayEXT"));
    if (get_platform_display == nullptr)
      throw_egl_error("eglGetProcAddress(eglGetPlatformDisplayEXT)");
    const EGLDisplay surfaceless =
        get_platform_display(EGL_PLATFORM_SURFACELESS_MESA, EGL_DEFAULT_DISPLAY, nullptr);
    if (surfaceless == EGL_NO_DISPLAY)
      throw_egl_error("eglGetPlatformDisplayEXT(surfaceless Mesa)");
    if (!eglInitialize(surfaceless, nullptr, nullptr)) throw_egl_error("eglInitialize");
    return surfaceless;
  }();
  return display;
}

// An OpenGL 3.3 core context with no surface: it renders into framebuffer objects only.
EGLContext create_context(EGLDisplay display) {
  if (!eglBindAPI(EGL_OPENGL_API)) throw_egl_error("eglBindAPI(EGL_OPENGL_API)");
  const EGLint config_attributes[] = {EGL_SURFACE_TYPE, 0, EGL_RENDERABLE_TYPE, EGL_OPENGL_BIT,
                                      EGL_NONE};
  EGLConfig config = nullptr;
  EGLint config_count = 0;
  if (!eglChooseConfig(display, config_attributes, &config, 1, &config_count))
    throw_egl_error("eglChooseConfig");
  // Mesa may offer no config for a surfaceless display; a context without one
  // (EGL_KHR_no_config_context) is as good, since it never draws to a surface.
  if (config_count == 0) config = EGL_NO_CONFIG_KHR;
  const EGLint context_attributes[] = {EGL_CONTEXT_MAJOR_VERSION,
                                       3,
                                       EGL_CONTEXT_MINOR_VERSION,
                                       3,
                                       EGL_CONTEXT_OPENGL_PROFILE_MASK,
                                       EGL_CONTEXT_OPENGL_CORE_PROFILE_BIT,
                                       EGL_NONE};
  const EGLContext context = eglCreateContext(display, config, EGL_NO_CONTEXT, context_attributes);
  if (context == EGL_NO_CONTEXT) throw_egl_error("eglCreateContext(OpenGL 3.3 core)");
  return context;
}

}  // namespace

struct HeadlessRenderer::State {
  EGLDisplay display = EGL_NO_DISPLAY;  // surfaceless_display()
  EGLContext context = EGL_NO_CONTEXT;
  GLuint framebuffer = 0;
  GLuint renderbuffer = 0;  // RGBA8, the framebuffer's color attachment
  std::unique_ptr<ImGuiSession> imgui;

  State() = default;
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  // Releases what was made, in reverse order; also after a constructor failed part way.
  ~State() {
    if (context == EGL_NO_CONTEXT) return;
    eglMakeCurrent(display, EGL_NO_SURFACE, EGL_NO_SURFACE, context);
    imgui.reset();
    glDeleteFramebuffers(1, &framebuffer);
    glDeleteRenderbuffers(1, &renderbuffer);
    eglMakeCurrent(display, EGL_NO_SURFACE, EGL_NO_SURFACE, EGL_NO_CONTEXT);
    eglDestroyContext(display, context);
  }

  void make_current() const {
    if (!eglMakeCurrent(display, EGL_NO_SURFACE, EGL_NO_SURFACE, context))
      throw_egl_error("eglMakeCurrent");
    imgui->make_current();
    glBindFramebuffer(GL_FRAMEBUFFER, framebuffer);
  }
};

HeadlessRenderer::HeadlessRenderer(int width, int height)
    : state_(std::make_unique<State>()), width_(width), height_(height) {
  STRATA_ASSERT(width > 0 && height > 0, "a headless framebuffer has at least one pixel");
  State& state = *state_;
  state.display = surfaceless_display();
  state.context = create_context(state.display);
  if (!eglMakeCurrent(state.display, EGL_NO_SURFACE, EGL_NO_SURFACE, state.context))
    throw_egl_error("eglMakeCurrent(no surface)");

  glGenRenderbuffers(1, &state.renderbuffer);
  glBindRenderbuffer(GL_RENDERBUFFER, state.renderbuffer);
  glRenderbufferStorage(GL_RENDERBUFFER, GL_RGBA8, width, height);
  glGenFramebuffers(1, &state.framebuffer);
  glBindFramebuffer(GL_FRAMEBUFFER, state.framebuffer);
  glFramebufferRenderbuffer(GL_FRAMEBUFFER, GL_COLOR_ATTACHMENT0, GL_RENDERBUFFER,
                            state.renderbuffer);
  const GLenum status = glCheckFramebufferStatus(GL_FRAMEBUFFER);
  if (status != GL_FRAMEBUFFER_COMPLETE) {
    throw SurfaceError(fmt::format(
        "glCheckFramebufferStatus: a {}x{} RGBA8 framebuffer is incomplete (status 0x{:04X}); "
        "try a smaller size, or check the Mesa driver (libgl1-mesa-dri)",
        width, height, status));
  }
  state.imgui = std::make_unique<ImGuiSession>();
}

HeadlessRenderer::~HeadlessRenderer() = default;

void HeadlessRenderer::frame(const std::function<void()>& draw) {
  state_->make_current();
  ImGuiIO& io = ImGui::GetIO();
  io.DisplaySize = ImVec2(static_cast<float>(width_), static_cast<float>(height_));
  io.DeltaTime = kFrameSeconds;
  ImGui_ImplOpenGL3_NewFrame();
  ImGui::NewFrame();
  draw();
  ImGui::Render();
  render_draw_data(width_, height_);
  glFinish();
}

Image HeadlessRenderer::pixels() const {
  state_->make_current();
  return read_pixels(width_, height_);
}

namespace {

// GLFW from glfwInit to glfwTerminate, a window with an OpenGL 3.3 core context current, and
// ImGui on it; torn down in reverse order, also when draw() throws.
class GlfwWindow {
 public:
  explicit GlfwWindow(const WindowOptions& options) {
    if (!glfwInit()) {
      throw SurfaceError(
          fmt::format("cannot open a window: glfwInit failed: {} (no display? set DISPLAY, or use "
                      "--screenshot PNG to render without one)",
                      last_glfw_error()));
    }
    glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
    glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
    glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
    glfwWindowHint(GLFW_OPENGL_FORWARD_COMPAT, GLFW_TRUE);  // macOS requires it for core profiles
    window_ =
        glfwCreateWindow(options.width, options.height, options.title.c_str(), nullptr, nullptr);
    if (window_ == nullptr) {
      const std::string error = last_glfw_error();
      glfwTerminate();
      throw SurfaceError(fmt::format(
          "cannot open a window: glfwCreateWindow (OpenGL 3.3 core) failed: {} (use --screenshot "
          "PNG to render without a window)",
          error));
    }
    glfwMakeContextCurrent(window_);
    // Tests ask for a number of frames and should not wait for the display's refresh.
    glfwSwapInterval(options.frames > 0 ? 0 : 1);
    try {
      imgui_ = std::make_unique<ImGuiSession>();
    } catch (...) {
      close();
      throw;
    }
    ImGui_ImplGlfw_InitForOpenGL(window_, true);
  }
  ~GlfwWindow() {
    imgui_->make_current();
    ImGui_ImplGlfw_Shutdown();
    imgui_.reset();
    close();
  }
  GlfwWindow(const GlfwWindow&) = delete;
  GlfwWindow& operator=(const GlfwWindow&) = delete;

  GLFWwindow* get() const { return window_; }

 private:
  static std::string last_glfw_error() {
    const char* description = nullptr;
    glfwGetError(&description);
    return description != nullptr ? description : "no description";
  }
  void close() {
    glfwDestroyWindow(window_);
    glfwTerminate();
  }

  GLFWwindow* window_ = nullptr;
  std::unique_ptr<ImGuiSession> imgui_;
};

}  // namespace

void run_window(const WindowOptions& options, const std::function<void()>& draw) {
  STRATA_ASSERT(options.screenshot_path.empty() || options.frames > 0,
                "a window screenshot is taken on the last of `frames` frames");
  GlfwWindow window(options);
  for (int frame = 1; !glfwWindowShouldClose(window.get()); ++frame) {
    glfwPollEvents();
    ImGui_ImplOpenGL3_NewFrame();
    ImGui_ImplGlfw_NewFrame();
    ImGui::NewFrame();
    draw();
    ImGui::Render();
    int width_px = 0;
    int height_px = 0;
    glfwGetFramebufferSize(window.get(), &width_px, &height_px);
    render_draw_data(width_px, height_px);
    const bool last_frame = frame == options.frames;
    // The back buffer holds this frame until the swap; afterwards its content is undefined.
    if (last_frame && !options.screenshot_path.empty()) {
      glReadBuffer(GL_BACK);
      write_png(options.screenshot_path, read_pixels(width_px, height_px));
    }
    glfwSwapBuffers(window.get());
    if (last_frame) break;
  }
}

}  // namespace strata::viewer
