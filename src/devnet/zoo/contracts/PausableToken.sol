// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;

import {ZooERC20} from "./ZooERC20.sol";

/// The owner can freeze every transfer (it is not paused in the zoo, so trading works until then).
contract PausableToken is ZooERC20 {
    bool public paused;

    error TransfersPaused();

    constructor(string memory name_, string memory symbol_, uint256 supply) {
        _init(name_, symbol_, supply, msg.sender);
    }

    function pause() external onlyOwner {
        paused = true;
    }

    function unpause() external onlyOwner {
        paused = false;
    }

    function _transfer(address from, address to, uint256 value) internal override {
        if (paused) revert TransfersPaused();
        _move(from, to, value);
    }
}
