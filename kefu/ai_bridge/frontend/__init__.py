"""Caller audio front end: DeepFilterNet3 denoising and speexdsp echo cancellation."""

from kefu.ai_bridge.frontend.aec import EchoCanceller, erle_db
from kefu.ai_bridge.frontend.chain import CallerFrontEnd
from kefu.ai_bridge.frontend.denoise import Denoiser, denoise_buffer

__all__ = ["CallerFrontEnd", "Denoiser", "EchoCanceller", "denoise_buffer", "erle_db"]
